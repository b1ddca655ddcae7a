"""`POST /v1/responses` (OpenAI Responses, stateless) on the chat pipeline.

A request becomes the one internal `ChatCompletionRequest` (`convert`) and
runs through `Frontend.chat`; its chat chunks are shaped into Responses stream
events by `ResponseStream` (`stream`). Streaming sends those events;
non-streaming folds the same events (`fold_response`), so the two cannot
disagree. Stops, tool calls and reasoning are the pipeline's: nothing here
re-decides them. `routes` wires it up.
"""

from rotor.api.responses.routes import register_responses

__all__ = ["register_responses"]
