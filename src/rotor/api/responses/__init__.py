"""`/v1/responses` (OpenAI Responses) on the chat pipeline.

A request, validated once as a Responses request, becomes the one internal
`ChatCompletionRequest` (`convert`) and runs through `Frontend.chat`.
Streaming, `ResponseStream` shapes its internal events into Responses stream
events; not streaming, `response_body` builds the response from the same
internal events, collected, with the same items (`items`). Stops, tool calls
and reasoning are the pipeline's: nothing here re-decides them. Responses
are kept (`store`: the contract; `stored`: the routes' view of it; `record`:
what a record holds) and continued (`chain`); `background` runs them
without waiting, `listing` pages their input items, and `routes` wires it
all up.
"""

from rotor.api.responses.routes import register_responses

__all__ = ["register_responses"]
