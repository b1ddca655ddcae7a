"""The rpcs of `inference.GRPCInferenceService` rotor serves, over the same
Responder as the HTTP routes: one model lookup, admission control, the
completions pipeline and metrics (endpoint `kserve`).

ServerLive, ServerReady and ServerMetadata stay open under `--api-key`, as
HTTP's probes and API description do; every model rpc needs the key.
Readiness: the server is ready once its engines have started and some model
can be served, and stops being ready when told to leave; a model is ready
while something can serve it (`/v1/models` lists it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import TypeAlias

import grpc

from rotor import __version__
from rotor.api.auth import APIKeys
from rotor.api.body import client_request_id
from rotor.api.drain import SHUTTING_DOWN
from rotor.api.errors import APIError
from rotor.api.kserve import answer, model
from rotor.api.kserve import kserve_pb2 as pb
from rotor.api.kserve.kserve_pb2_grpc import GRPCInferenceServiceServicer
from rotor.api.kserve.request import InferCall, read_infer
from rotor.api.kserve.status import abort, as_api_error, key_refusal
from rotor.api.kserve.stream import stream_responses
from rotor.api.observe import observed
from rotor.api.respond import Responder
from rotor.frontend import ModelNotFound, StartedResponse
from rotor.pipeline.collected import collect
from rotor.pipeline.events import ChoiceEvent

ENDPOINT = "kserve"  # the endpoint label of its metrics

# grpc is not analysed (pyproject's mypy overrides): its context is Any to mypy
Context: TypeAlias = grpc.aio.ServicerContext


class KServeService(GRPCInferenceServiceServicer):
    def __init__(
        self,
        responder: Responder,
        api_key: str | Sequence[str] | None,
        leaving: Callable[[], bool],
    ) -> None:
        self.responder = responder
        self.frontend = responder.frontend
        self._keys = APIKeys(api_key) if api_key is not None else None
        self._leaving = leaving

    # -- health and metadata --------------------------------------------------------------

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Context
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Context
    ) -> pb.ServerReadyResponse:
        frontend = self.frontend
        live = any(e.live() for e in frontend.registry.entries())
        ready = frontend.ready and not self._leaving() and live
        return pb.ServerReadyResponse(ready=ready)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="rotor", version=__version__)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Context
    ) -> pb.ModelReadyResponse:
        await self._authorize(context)
        try:
            self.frontend.live_model(request.name)
        except ModelNotFound:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=request.version in ("", model.VERSION))

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        await self._authorize(context)
        try:
            model.check_version(request.name, request.version)
            return model.metadata(self.frontend.live_model(request.name))
        except Exception as e:
            error = as_api_error(e)
        await abort(context, error)

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Context
    ) -> pb.ModelConfigResponse:
        await self._authorize(context)
        try:
            model.check_version(request.name, request.version)
            return model.config(self.frontend.live_model(request.name))
        except Exception as e:
            error = as_api_error(e)
        await abort(context, error)

    # -- inference ------------------------------------------------------------------------

    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Context
    ) -> pb.ModelInferResponse:
        await self._authorize(context)
        try:
            call = read_infer(request)
            if call.streaming:
                raise APIError(
                    400,
                    "streaming is ModelStreamInfer's: ModelInfer answers once "
                    "(send streaming false, or leave it out)",
                )
            resp, events = await self._begin(call, request)
            try:
                choices = await collect(events, resp.n)
            finally:
                await events.aclose()
            return answer.whole(call, resp, choices)
        except Exception as e:
            error = as_api_error(e)
        await abort(context, error)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncGenerator[pb.ModelStreamInferResponse, None]:
        await self._authorize(context)
        responses = stream_responses(request_iterator, self._answer, self.responder.streams)
        try:
            async for response in responses:
                yield response
        except APIError as e:  # the shutdown grace is over
            error = e
        else:
            return
        finally:
            await responses.aclose()
        await abort(context, error)

    async def _answer(self, request: pb.ModelInferRequest, put: answer.Put) -> None:
        """One request of a stream, answered: its responses, or its error."""
        try:
            if self._leaving():
                raise APIError(503, SHUTTING_DOWN)
            call = read_infer(request)
            resp, events = await self._begin(call, request)
            try:
                if call.streaming:
                    await answer.streamed(call, resp, events, put)
                else:
                    choices = await collect(events, resp.n)
                    put(answer.final(answer.whole(call, resp, choices), True))
            finally:
                await events.aclose()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            put(answer.stream_error(request, as_api_error(e).message))

    async def _begin(
        self, call: InferCall, request: pb.ModelInferRequest
    ) -> tuple[StartedResponse, AsyncGenerator[ChoiceEvent, None]]:
        """The completion started (as `/v1/completions` starts it) and its
        events under the response metrics."""
        t0 = time.perf_counter()
        model.check_version(call.model, request.model_version)
        responder = self.responder
        rid = client_request_id(call.id)  # names the response and the logs
        resp = await responder.start(self.frontend.completion, call.completion, rid, ENDPOINT)
        return resp, observed(resp, responder.metrics, ENDPOINT, call.streaming, t0)

    async def _authorize(self, context: Context) -> None:
        if self._keys is None:
            return
        error = key_refusal(context.invocation_metadata() or (), self._keys)
        if error is not None:
            await abort(context, error)
