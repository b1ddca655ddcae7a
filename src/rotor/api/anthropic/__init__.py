"""`POST /v1/messages` and `/v1/messages/count_tokens` (Anthropic Messages) on
the chat pipeline.

A request becomes the one internal `ChatCompletionRequest` (`convert`) and
runs through `Frontend.chat`; `MessageStream` shapes its internal events into
Anthropic's stream events (`stream`). Streaming sends those events (with pings
while the model is quiet); non-streaming folds the same events
(`fold_message`), so the two cannot disagree. Stops, tool calls and reasoning
are the pipeline's.

Errors on these routes (and on any /v1/ request carrying `anthropic-version`)
leave in Anthropic's envelope, whoever raised them (`rotor.api.errors`).
`models` describes served models in Anthropic's shape; `routes` wires it up.
"""

from rotor.api.anthropic.models import anthropic_model, anthropic_models
from rotor.api.anthropic.routes import register_anthropic

__all__ = ["anthropic_model", "anthropic_models", "register_anthropic"]
