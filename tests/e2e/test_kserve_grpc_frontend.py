"""KServe gRPC on `rotor frontend --grpc-port` (docs/grpc.md): the models
of live workers on a real nats-server, served to NVIDIA's own client as
they are over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as triton

from support.cluster import Frontend, nats_server, start_frontend, start_worker

MODEL = "mock-model"


@pytest.fixture(scope="module")
def frontend() -> Iterator[Frontend]:
    with nats_server() as nats:
        worker = start_worker(nats, "out=mocker", "--speedup-ratio", "0")
        front = start_frontend(nats, "--grpc-port", "0")
        try:
            front.wait_workers(MODEL, {worker.id})
            yield front
        finally:
            front.proc.stop()
            worker.proc.stop()


def test_a_worker_s_model_over_grpc(frontend: Frontend) -> None:
    client = triton.InferenceServerClient(frontend.grpc)
    try:
        assert client.is_server_ready()
        assert client.is_model_ready(MODEL)
        assert not client.is_model_ready("no-such-model")
        meta = client.get_model_metadata(MODEL, as_json=True)
        assert [t["name"] for t in meta["inputs"]] == ["text_input", "streaming"]
        prompt = triton.InferInput("text_input", [1], "BYTES")
        prompt.set_data_from_numpy(np.array([b"Tell me a story"], dtype=np.object_))
        result = client.infer(MODEL, [prompt], parameters={"max_tokens": 6, "seed": 1})
        http = frontend.openai().completions.create(
            model=MODEL, prompt="Tell me a story", max_tokens=6, seed=1
        )
        assert [t.decode() for t in result.as_numpy("text_output")] == [http.choices[0].text]
        assert [r.decode() for r in result.as_numpy("finish_reason")] == [
            http.choices[0].finish_reason
        ]
    finally:
        client.close()
