"""`POST /v1/messages` and `/v1/messages/count_tokens` (Anthropic Messages) on
the chat pipeline.

A request, validated once as Anthropic's, becomes the one internal
`ChatCompletionRequest` (`convert`) and runs through `Frontend.chat`.
Streaming, `MessageStream` shapes its internal events into Anthropic's stream
events (with pings while the model is quiet); not streaming, `message_body`
builds the message from the same internal events, collected (`stream`).
Stops, tool calls and reasoning are the pipeline's.

Errors on these routes (and on any /v1/ request carrying `anthropic-version`)
leave in Anthropic's envelope, whoever raised them (`rotor.api.errors`).
`models` describes served models in Anthropic's shape; `routes` wires it up.
"""

from rotor.api.anthropic.models import anthropic_model, anthropic_models
from rotor.api.anthropic.routes import register_anthropic

__all__ = ["anthropic_model", "anthropic_models", "register_anthropic"]
