"""vLLM's KV offloading through rotor's engine arguments (`-- --kv-offloading-size
GiB`, or an offloading connector in `--kv-transfer-config`): its KV events are
made self-describing for the relay, and it is refused where vLLM cannot run it
(vLLM's CPU build: tried, it fails at start) or would replace a prefill or
decode worker's connector. No engine is started here."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from rotor.engines.vllm.args import NATIVE_OFFLOAD_REFUSAL, engine_args, offloading

from support.llama import add_llama_weights
from support.models import chatml_model
from support.vllm_setup import VLLM_ARGS

SELF_DESCRIBING = {"kv_connector_extra_config": {"self_describing_kv_events": True}}


def test_native_offloading_gets_self_describing_events() -> None:
    assert offloading(None, 4.0, "native", "agg", gpu=True) == SELF_DESCRIBING
    # the user's connector config and word are kept
    user = {"kv_connector_extra_config": {"self_describing_kv_events": False, "block_size": 64}}
    assert offloading(user, 4.0, "native", "agg", gpu=True) == user
    named = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
    assert offloading(named, None, "native", "agg", gpu=True) == {**named, **SELF_DESCRIBING}
    simple = {"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both"}
    assert offloading(simple, None, "native", "agg", gpu=False) == {**simple, **SELF_DESCRIBING}
    # nothing asked for, or LMCache's own offloading: as given
    assert offloading(None, None, "native", "agg", gpu=True) is None
    other = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    assert offloading(other, None, "native", "agg", gpu=True) == other
    assert offloading(None, 4.0, "lmcache", "agg", gpu=False) is None


def test_offloading_is_refused_beside_a_handover_and_without_a_gpu() -> None:
    with pytest.raises(ValueError, match="disaggregation-mode prefill: vLLM would put"):
        offloading({"kv_connector": "NixlConnector"}, 4.0, "native", "prefill", gpu=True)
    with pytest.raises(ValueError, match="needs a GPU") as refused:
        offloading(None, 4.0, "native", "agg", gpu=False)
    assert NATIVE_OFFLOAD_REFUSAL in str(refused.value)


def test_vllms_cpu_build_refuses_native_offloading_as_rotor_says() -> None:
    """The refusal rotor quotes is vLLM's own: its CPU offloading spec's worker
    (`CPUOffloadingSpec.get_worker` in vLLM), called here as the engine's worker calls
    it once started (after a 40 s start). If a vLLM build runs it, or says
    otherwise, rotor's check must be looked at again."""
    from vllm.platforms import current_platform
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    assert not (current_platform.is_cuda_alike() or current_platform.is_xpu())
    spec = SimpleNamespace(_worker=None)  # nothing made yet, as at the worker's start
    with pytest.raises(Exception, match=NATIVE_OFFLOAD_REFUSAL):
        CPUOffloadingSpec.get_worker(spec, None)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_llama_weights(chatml_model(tmp_path_factory.mktemp("offload"), "tiny"), 2048)


def test_engine_args_on_this_cpu(model: Path) -> None:
    with pytest.raises(ValueError, match="--kv-offloading-size: vLLM's native KV offloading"):
        engine_args(str(model), 2048, [*VLLM_ARGS, "--kv-offloading-size", "1"], "tcp://x:1")
    named = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
    words = [*VLLM_ARGS, "--kv-transfer-config", json.dumps(named)]
    args = engine_args(str(model), 2048, words, "tcp://x:1")
    assert args.kv_transfer_config.kv_connector == "OffloadingConnector"
    assert args.kv_transfer_config.kv_connector_extra_config == {"self_describing_kv_events": True}


def test_vllm_keeps_the_flag_when_it_fills_in_its_offloading_connector(model: Path) -> None:
    """`--kv-offloading-size` on a GPU: rotor's config has the flag alone, and
    vLLM's own config (VllmConfig's post-init) adds its connector and size to it."""
    from vllm.config import KVTransferConfig

    args = engine_args(str(model), 2048, list(VLLM_ARGS), "tcp://127.0.0.1:1")
    config = offloading(None, 0.5, "native", "agg", gpu=True)
    assert config is not None
    args.kv_transfer_config = KVTransferConfig(**config)
    args.kv_offloading_size = 0.5
    vllm_config = args.create_engine_config()
    transfer = vllm_config.kv_transfer_config
    assert transfer.kv_connector == "OffloadingConnector" and transfer.kv_role == "kv_both"
    assert transfer.kv_connector_extra_config == {
        "self_describing_kv_events": True,
        "cpu_bytes_to_use": 0.5 * (1 << 30),
    }
