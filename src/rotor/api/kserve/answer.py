"""The completions' answers as KServe responses: the whole answer from the
body `/v1/completions` would return (`completion_body`), and a streamed
answer from the chunks it would stream (`CompletionShaper`), so both say
exactly what HTTP says.

Each response has `text_output` and `finish_reason` (BYTES, one element per
choice; a streamed response one element, its choice's `index` a parameter
when there are several). The last response of a ModelStreamInfer answer
carries Triton's `triton_final_response` parameter true (the earlier ones
false), and the usage as `prompt_tokens` and `completion_tokens`
parameters; a unary answer carries the usage too."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from rotor.api.kserve import kserve_pb2 as pb
from rotor.api.kserve.model import FINISH_REASON, TEXT_OUTPUT, VERSION
from rotor.api.kserve.request import InferCall
from rotor.api.kserve.tensors import bytes_output
from rotor.api.openai.completions import CompletionShaper, completion_body
from rotor.frontend import StartedResponse
from rotor.pipeline.collected import Collected
from rotor.pipeline.events import ChoiceEvent

FINAL = "triton_final_response"

Put = Callable[[pb.ModelStreamInferResponse], None]


def whole(
    call: InferCall, resp: StartedResponse, choices: list[Collected]
) -> pb.ModelInferResponse:
    """The whole answer (ModelInfer, or ModelStreamInfer without streaming)."""
    body = completion_body(resp, choices)
    texts = [c["text"] for c in body["choices"]]
    reasons = [c["finish_reason"] or "" for c in body["choices"]]
    out = infer_response(call, resp.model, texts, reasons)
    _usage(out, resp)
    return out


async def streamed(
    call: InferCall, resp: StartedResponse, events: AsyncIterator[ChoiceEvent], put: Put
) -> None:
    """One response per chunk `/v1/completions` would stream, each sent at
    once; the one that finishes the last choice is the final one (held until
    the events end, for the usage)."""
    shaper = CompletionShaper(resp)
    several = resp.n > 1
    unfinished = resp.n
    last: pb.ModelInferResponse | None = None
    async for event in events:
        for chunk in shaper.event(event):
            (c,) = chunk["choices"]
            reason = c["finish_reason"]
            out = infer_response(call, resp.model, [c["text"]], [reason or ""])
            if several:
                out.parameters["index"].int64_param = c["index"]
            if reason is not None:
                unfinished -= 1
                if not unfinished:
                    last = out
                    continue
            put(final(out, False))
    if last is None:  # no choice finished (cancelled): Triton's empty final response
        last = infer_response(call, resp.model, None, None)
    _usage(last, resp)
    put(final(last, True))


def infer_response(
    call: InferCall, model: str, texts: list[str] | None, reasons: list[str] | None
) -> pb.ModelInferResponse:
    """A response with the requested outputs (none when `texts` is None)."""
    out = pb.ModelInferResponse(model_name=model, model_version=VERSION, id=call.id)
    if texts is not None and reasons is not None:
        columns = {TEXT_OUTPUT: texts, FINISH_REASON: reasons}
        for name in call.outputs:
            bytes_output(out, name, [v.encode() for v in columns[name]])
    return out


def final(response: pb.ModelInferResponse, is_final: bool) -> pb.ModelStreamInferResponse:
    """`response` on a stream, marked as its request's last one or not."""
    response.parameters[FINAL].bool_param = is_final
    return pb.ModelStreamInferResponse(infer_response=response)


def stream_error(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    """A request on a stream that failed: Triton's `error_message`, its id and
    model said back, and its end (the stream stays open for the next one)."""
    response = pb.ModelInferResponse(
        model_name=request.model_name, model_version=VERSION, id=request.id
    )
    response.parameters[FINAL].bool_param = True
    return pb.ModelStreamInferResponse(error_message=message, infer_response=response)


def _usage(out: pb.ModelInferResponse, resp: StartedResponse) -> None:
    out.parameters["prompt_tokens"].int64_param = resp.usage.prompt_tokens
    out.parameters["completion_tokens"].int64_param = resp.usage.completion_tokens
