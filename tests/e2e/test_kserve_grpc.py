"""KServe v2 / Triton gRPC (`--grpc-port`, docs/grpc.md) on a real `rotor
run`: NVIDIA's own client (tritonclient[grpc]) for health, metadata, config,
unary and streamed inference, and grpcio with rotor's generated stubs for
the error codes; every answer checked against what `/v1/completions` says
for the same request, the mocker's seeded text being the same both ways."""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from rotor.api.kserve import kserve_pb2 as pb
from rotor.api.kserve.kserve_pb2_grpc import GRPCInferenceServiceStub

from support.kserve import set_params
from support.server import Server, rotor_server
from support.wait import wait_for

MODEL = "mock-model"
PROMPT = "Tell me a story"
KEY = "s3cret"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--grpc-port", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[triton.InferenceServerClient]:
    c = triton.InferenceServerClient(server.grpc)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(server: Server) -> Iterator[GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc) as channel:
        yield GRPCInferenceServiceStub(channel)


def text_input(*prompts: str) -> triton.InferInput:
    t = triton.InferInput("text_input", [len(prompts)], "BYTES")
    t.set_data_from_numpy(np.array([p.encode() for p in prompts], dtype=np.object_))
    return t


def scalar(name: str, datatype: str, value: Any) -> triton.InferInput:
    t = triton.InferInput(name, [1], datatype)
    dtype = {"BOOL": np.bool_, "INT32": np.int32, "BYTES": np.object_}[datatype]
    t.set_data_from_numpy(np.array([value], dtype=dtype))
    return t


def texts(result: triton.InferResult, name: str = "text_output") -> list[str]:
    return [v.decode() for v in result.as_numpy(name)]


def completion(server: Server, **body: Any) -> dict[str, Any]:
    """`/v1/completions` for the same request: its 200 body."""
    r = httpx.post(server.v1 + "/completions", json={"model": MODEL, **body}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def http_error(server: Server, **body: Any) -> tuple[int, str]:
    r = httpx.post(server.v1 + "/completions", json=body, timeout=30)
    return r.status_code, r.json()["error"]["message"]


def raw_infer(
    prompt: bytes | None = PROMPT.encode(), model: str = MODEL, **params: Any
) -> pb.ModelInferRequest:
    """A ModelInferRequest written by hand, its parameters typed as tritonclient types them."""
    req = pb.ModelInferRequest(model_name=model, id="raw-1")
    if prompt is not None:
        t = req.inputs.add(name="text_input", datatype="BYTES", shape=[1])
        t.contents.bytes_contents.append(prompt)
    set_params(req.parameters, params)
    return req


def rpc_error(call: Any, request: Any, metadata: Any = None) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(request, metadata=metadata, timeout=30)
    return e.value


# -- health, metadata, config ---------------------------------------------------------


def test_server_and_model_readiness(client: triton.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(MODEL)
    assert client.is_model_ready(MODEL, "1")
    assert not client.is_model_ready(MODEL, "2")
    assert not client.is_model_ready("no-such-model")


def test_server_metadata(client: triton.InferenceServerClient) -> None:
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "rotor" and meta["version"]


def test_model_metadata_names_the_text_tensors(client: triton.InferenceServerClient) -> None:
    meta = client.get_model_metadata(MODEL, as_json=True)
    assert (meta["name"], meta["versions"], meta["platform"]) == (MODEL, ["1"], "rotor")
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("text_input", "BYTES", ["1"]),
        ("streaming", "BOOL", ["1"]),
    ]  # int64 as JSON strings: protobuf's JSON form, as tritonclient says
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["outputs"]] == [
        ("text_output", "BYTES", ["-1"]),
        ("finish_reason", "BYTES", ["-1"]),
    ]


def test_model_config_is_a_decoupled_text_model(client: triton.InferenceServerClient) -> None:
    config = client.get_model_config(MODEL).config
    assert (config.name, config.platform, config.backend, config.max_batch_size) == (
        MODEL,
        "rotor",
        "rotor",
        0,
    )
    assert config.model_transaction_policy.decoupled
    types = triton.model_config_pb2.DataType
    assert [(i.name, types.Name(i.data_type), list(i.dims), i.optional) for i in config.input] == [
        ("text_input", "TYPE_STRING", [1], False),
        ("streaming", "TYPE_BOOL", [1], True),
    ]
    assert [(o.name, types.Name(o.data_type)) for o in config.output] == [
        ("text_output", "TYPE_STRING"),
        ("finish_reason", "TYPE_STRING"),
    ]


def test_an_unknown_model_has_http_s_404(server: Server, stub: GRPCInferenceServiceStub) -> None:
    r = httpx.get(server.v1 + "/models/no-such-model", timeout=10)
    assert r.status_code == 404
    for call, request in [
        (stub.ModelMetadata, pb.ModelMetadataRequest(name="no-such-model")),
        (stub.ModelConfig, pb.ModelConfigRequest(name="no-such-model")),
    ]:
        e = rpc_error(call, request)
        assert e.code() == grpc.StatusCode.NOT_FOUND
        assert e.details() == r.json()["error"]["message"]


# -- unary inference ------------------------------------------------------------------


def test_infer_is_the_completions_answer(
    server: Server, client: triton.InferenceServerClient
) -> None:
    """Parameters as tritonclient sends them: the same seeded text, finish
    and usage as `/v1/completions`."""
    http = completion(server, prompt=PROMPT, max_tokens=12, seed=5)
    result = client.infer(MODEL, [text_input(PROMPT)], parameters={"max_tokens": 12, "seed": 5})
    (choice,) = http["choices"]
    assert choice["text"] and choice["finish_reason"] == "length"
    assert texts(result) == [choice["text"]]
    assert texts(result, "finish_reason") == ["length"]
    response = result.get_response()
    assert response.model_name == MODEL and response.model_version == "1"
    usage = {k: response.parameters[k].int64_param for k in ("prompt_tokens", "completion_tokens")}
    assert usage == {k: http["usage"][k] for k in usage}


def test_stop_strings_as_tensors_end_the_text(
    server: Server, client: triton.InferenceServerClient
) -> None:
    """A stop string from the middle of the seeded text, and max_tokens, as
    input tensors: cut before the stop, finish "stop", as over HTTP."""
    full = completion(server, prompt=PROMPT, max_tokens=24, seed=9)["choices"][0]["text"]
    stop = full[len(full) // 2 :][:3]
    http = completion(server, prompt=PROMPT, max_tokens=24, seed=9, stop=stop)["choices"][0]
    assert http["text"] == full[: full.index(stop)] and http["finish_reason"] == "stop"
    inputs = [
        text_input(PROMPT),
        scalar("max_tokens", "INT32", 24),
        scalar("stop", "BYTES", stop.encode()),
    ]
    result = client.infer(MODEL, inputs, parameters={"seed": 9})
    assert texts(result) == [http["text"]]
    assert texts(result, "finish_reason") == ["stop"]


def test_several_prompts_are_one_choice_each(
    server: Server, client: triton.InferenceServerClient
) -> None:
    http = completion(server, prompt=["one", "two"], max_tokens=4, seed=2)
    result = client.infer(
        MODEL, [text_input("one", "two")], parameters={"max_tokens": 4, "seed": 2}
    )
    assert texts(result) == [c["text"] for c in http["choices"]]
    assert texts(result, "finish_reason") == ["length", "length"]


def test_requested_outputs_only(client: triton.InferenceServerClient) -> None:
    result = client.infer(
        MODEL,
        [text_input(PROMPT)],
        outputs=[triton.InferRequestedOutput("finish_reason")],
        parameters={"max_tokens": 2, "ignore_eos": True},  # the mocker's EOS is random
    )
    assert texts(result, "finish_reason") == ["length"]
    assert result.as_numpy("text_output") is None


# -- streaming --------------------------------------------------------------------------


class Stream:
    """tritonclient's stream, its callback's results in a queue."""

    def __init__(self, client: triton.InferenceServerClient) -> None:
        self.client = client
        self.results: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def answer(self, request_id: str, inputs: list, **params: Any) -> list[Any]:
        """Every response to one request, up to its final one (or its error)."""
        self.client.async_stream_infer(MODEL, inputs, request_id=request_id, parameters=params)
        out = []
        while True:
            result, error = self.results.get(timeout=30)
            if error is not None:
                return [*out, error]
            out.append(result)
            response = result.get_response()
            assert response.id == request_id
            if response.parameters["triton_final_response"].bool_param:
                return out

    def close(self) -> None:
        self.client.stop_stream()


@pytest.fixture
def stream(client: triton.InferenceServerClient) -> Iterator[Stream]:
    s = Stream(client)
    yield s
    s.close()


def test_streamed_deltas_are_the_whole_text(
    server: Server, client: triton.InferenceServerClient, stream: Stream
) -> None:
    whole = client.infer(MODEL, [text_input(PROMPT)], parameters={"max_tokens": 16, "seed": 3})
    inputs = [text_input(PROMPT), scalar("streaming", "BOOL", True)]
    responses = stream.answer("s-1", inputs, max_tokens=16, seed=3)
    assert len(responses) > 1
    finals = [r.get_response().parameters["triton_final_response"].bool_param for r in responses]
    assert finals == [False] * (len(responses) - 1) + [True]
    deltas = [texts(r)[0] for r in responses]
    assert "".join(deltas) == texts(whole)[0]
    reasons = [texts(r, "finish_reason")[0] for r in responses]
    assert reasons == [""] * (len(responses) - 1) + texts(whole, "finish_reason")
    last = responses[-1].get_response().parameters
    tokens = whole.get_response().parameters["completion_tokens"].int64_param
    assert last["completion_tokens"].int64_param == tokens


def test_a_stream_answers_unstreamed_requests_once_and_stays_open_after_an_error(
    server: Server, stream: Stream
) -> None:
    """On one stream: a request without streaming gets one (final) response;
    a refused one gets Triton's error_message with HTTP's 400 message; the
    next request is still served."""
    (one,) = stream.answer("u-1", [text_input(PROMPT)], max_tokens=5, seed=4)
    assert texts(one) == [
        completion(server, prompt=PROMPT, max_tokens=5, seed=4)["choices"][0]["text"]
    ]
    (error,) = stream.answer("bad-1", [text_input(PROMPT)], max_tokens=0)
    assert isinstance(error, InferenceServerException)
    status, message = http_error(server, model=MODEL, prompt=PROMPT, max_tokens=0)
    assert status == 400 and error.message() == message
    (again,) = stream.answer("u-2", [text_input(PROMPT)], max_tokens=5, seed=4)
    assert texts(again) == texts(one)


def test_requests_on_one_stream_are_answered_side_by_side(stub: GRPCInferenceServiceStub) -> None:
    """Three requests sent at once on a raw stream: each answered in full
    (told apart by id), then the call ends once the client has sent all."""
    requests = []
    for i in range(3):
        req = raw_infer(max_tokens=6, seed=i, streaming=True)
        req.id = f"side-{i}"
        requests.append(req)
    by_id: dict[str, list[pb.ModelStreamInferResponse]] = {}
    for response in stub.ModelStreamInfer(iter(requests), timeout=60):
        assert not response.error_message, response.error_message
        by_id.setdefault(response.infer_response.id, []).append(response)
    assert sorted(by_id) == ["side-0", "side-1", "side-2"]
    for responses in by_id.values():
        finals = [
            r.infer_response.parameters["triton_final_response"].bool_param for r in responses
        ]
        assert finals[-1] and not any(finals[:-1])


# -- errors, as status codes with HTTP's messages ----------------------------------------


@pytest.mark.parametrize(
    ("params", "body"),
    [
        ({"temperature": -1.0}, {"temperature": -1.0}),
        ({"max_tokens": 0}, {"max_tokens": 0}),
        ({"max_tokens": "5"}, {"max_tokens": "5"}),
        ({"no_such_field": True}, {"no_such_field": True}),
    ],
)
def test_a_bad_parameter_is_http_s_400(
    server: Server, stub: GRPCInferenceServiceStub, params: dict, body: dict
) -> None:
    status, message = http_error(server, model=MODEL, prompt=PROMPT, **body)
    assert status == 400
    e = rpc_error(stub.ModelInfer, raw_infer(**params))
    assert (e.code(), e.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_an_unknown_model_is_not_found(server: Server, stub: GRPCInferenceServiceStub) -> None:
    status, message = http_error(server, model="no-such-model", prompt=PROMPT)
    assert status == 404
    e = rpc_error(stub.ModelInfer, raw_infer(model="no-such-model"))
    assert (e.code(), e.details()) == (grpc.StatusCode.NOT_FOUND, message)


def test_the_tensors_rotor_needs(stub: GRPCInferenceServiceStub) -> None:
    e = rpc_error(stub.ModelInfer, raw_infer(prompt=None, max_tokens=3))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "text_input" in e.details()
    wrong = pb.ModelInferRequest(model_name=MODEL)
    t = wrong.inputs.add(name="text_input", datatype="INT32", shape=[1])
    t.contents.int_contents.append(1)
    e = rpc_error(stub.ModelInfer, wrong)
    assert (e.code(), e.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "input 'text_input' must be BYTES, got INT32",
    )
    e = rpc_error(stub.ModelInfer, raw_infer(streaming=True))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "ModelStreamInfer" in e.details()


def test_kserve_requests_are_counted_under_their_endpoint(
    server: Server, client: triton.InferenceServerClient, stub: GRPCInferenceServiceStub
) -> None:
    """As HTTP counts its requests: answered, and refused by the pipeline (a
    body that fails validation is refused before, and not counted)."""
    ok = 'endpoint="kserve",model="mock-model",status="200"'
    refused = 'endpoint="kserve",model="unknown",status="404"'

    def counts() -> tuple[float, float]:
        return server.metric("rotor_requests_total", ok), server.metric(
            "rotor_requests_total", refused
        )

    before = counts()
    client.infer(MODEL, [text_input(PROMPT)], parameters={"max_tokens": 2})
    rpc_error(stub.ModelInfer, raw_infer(model="no-such-model"))
    after = counts()
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)


# -- --api-key ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed() -> Iterator[Server]:
    with rotor_server("--api-key", KEY, "--grpc-port", "0") as srv:
        yield srv


def test_api_key_as_metadata(keyed: Server) -> None:
    with grpc.insecure_channel(keyed.grpc) as channel:
        stub = GRPCInferenceServiceStub(channel)
        ready = pb.ModelReadyRequest(name="echo")
        for metadata in (None, [("authorization", "Bearer wrong")], [("x-api-key", "wrong")]):
            e = rpc_error(stub.ModelReady, ready, metadata)
            assert (e.code(), e.details()) == (
                grpc.StatusCode.UNAUTHENTICATED,
                "invalid or missing API key",
            )
        twice = [("authorization", f"Bearer {KEY}"), ("authorization", f"Bearer {KEY}")]
        e = rpc_error(stub.ModelReady, ready, twice)
        assert (e.code(), e.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "duplicate authorization header",
        )
        assert stub.ModelReady(ready, metadata=[("x-api-key", KEY)], timeout=10).ready
        e = rpc_error(stub.ModelInfer, raw_infer(model="echo"))
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED
        # the probes stay open, as HTTP's /live and /health do
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
        assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready


def test_api_key_with_tritonclient(keyed: Server) -> None:
    c = triton.InferenceServerClient(keyed.grpc)
    try:
        headers = {"authorization": f"Bearer {KEY}"}
        result = c.infer("echo", [text_input("hello there")], headers=headers)
        assert texts(result) == ["hello there"]
        with pytest.raises(InferenceServerException, match="invalid or missing API key"):
            c.infer("echo", [text_input("hello there")])
    finally:
        c.close()


# -- processes and lifecycle --------------------------------------------------------------


def test_every_http_process_serves_grpc_on_one_port() -> None:
    """--http-workers 2: the parent names the one gRPC port its HTTP
    processes share; each infer, whichever process takes it, is served."""
    with rotor_server("--http-workers", "2", "--grpc-port", "0") as srv:
        assert "(every HTTP process)" in srv.log
        c = triton.InferenceServerClient(srv.grpc)
        try:

            def ready() -> bool:  # the HTTP processes bind it once they have started
                try:
                    return c.is_server_ready()
                except InferenceServerException:
                    return False

            wait_for("gRPC to be ready", ready, 30)
            for i in range(6):
                fresh = triton.InferenceServerClient(srv.grpc)  # a connection each
                try:
                    result = fresh.infer("echo", [text_input(f"hi {i}")])
                finally:
                    fresh.close()
                assert texts(result) == [f"hi {i}"]
        finally:
            c.close()


def test_sigterm_refuses_new_calls_and_ends_open_streams_at_the_grace() -> None:
    """SIGTERM: new calls are refused while a stream still runs; once the
    --shutdown-grace is over it ends with UNAVAILABLE and the shutdown
    message (as an HTTP stream ends with its error event); the process exits."""
    env = {"ROTOR_ECHO_DELAY_MS": "10"}
    with rotor_server("--grpc-port", "0", "--shutdown-grace", "2", env=env) as srv:
        target = srv.grpc
        channel = grpc.insecure_channel(target)
        stub = GRPCInferenceServiceStub(channel)
        request = raw_infer(prompt=b"z" * 1500, model="echo", streaming=True)  # 15 s of tokens
        got: list[pb.ModelStreamInferResponse] = []
        ended: list[grpc.RpcError] = []
        started = threading.Event()

        def read() -> None:
            try:
                for response in stub.ModelStreamInfer(iter([request]), timeout=60):
                    got.append(response)
                    started.set()
            except grpc.RpcError as e:
                ended.append(e)

        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(15), "the stream did not start"
        srv.process.send_signal(signal.SIGTERM)

        def refused() -> bool:
            with grpc.insecure_channel(target) as fresh:
                try:
                    GRPCInferenceServiceStub(fresh).ServerLive(pb.ServerLiveRequest(), timeout=1)
                except grpc.RpcError:
                    return True
            return False

        wait_for("new calls to be refused", refused, 10)
        assert reader.is_alive(), "the stream was over before new calls were refused"
        reader.join(30)
        channel.close()
        (error,) = ended
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert error.details() == "the server is shutting down; retry the request"
        assert all(not r.error_message for r in got)
        text = "".join(
            r.infer_response.raw_output_contents[0][4:].decode() for r in got
        )  # each one element: its 4-byte length, then the text
        assert 0 < len(text) < 1500 and set(text) == {"z"}
        assert srv.process.wait(30) in (0, -signal.SIGTERM)
