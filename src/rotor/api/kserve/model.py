"""What a text model is over KServe: the tensors it takes and gives (as
Dynamo's KServe frontend describes an OpenAI completions model), its
metadata and its Triton model config. Every model has one version, "1"."""

from __future__ import annotations

from rotor.api.errors import APIError
from rotor.api.kserve import kserve_pb2 as pb
from rotor.frontend import ModelEntry

PLATFORM = "rotor"
VERSION = "1"

TEXT_INPUT = "text_input"
STREAMING = "streaming"
TEXT_OUTPUT = "text_output"
FINISH_REASON = "finish_reason"
OUTPUTS = (TEXT_OUTPUT, FINISH_REASON)

# (name, datatype, shape, optional); -1: any size (one element per choice)
_INPUTS = ((TEXT_INPUT, "BYTES", [1], False), (STREAMING, "BOOL", [1], True))
_OUTPUTS = ((TEXT_OUTPUT, "BYTES", [-1]), (FINISH_REASON, "BYTES", [-1]))
_CONFIG_TYPES = {"BYTES": pb.TYPE_STRING, "BOOL": pb.TYPE_BOOL}


def check_version(name: str, version: str) -> None:
    """A request's model_version: empty (the one there is) or "1"."""
    if version not in ("", VERSION):
        raise APIError(404, f"the model {name!r} has no version {version!r}; its version is 1")


def metadata(entry: ModelEntry) -> pb.ModelMetadataResponse:
    Tensor = pb.ModelMetadataResponse.TensorMetadata
    return pb.ModelMetadataResponse(
        name=entry.name,
        versions=[VERSION],
        platform=PLATFORM,
        inputs=[Tensor(name=n, datatype=t, shape=s) for n, t, s, _ in _INPUTS],
        outputs=[Tensor(name=n, datatype=t, shape=s) for n, t, s in _OUTPUTS],
    )


def config(entry: ModelEntry) -> pb.ModelConfigResponse:
    """Triton's model config: no batch dimension (a request is one prompt, or
    several as a [N] text_input), and decoupled, as Triton's LLM models are:
    a streamed request gets many responses (ModelStreamInfer)."""
    return pb.ModelConfigResponse(
        config=pb.ModelConfig(
            name=entry.name,
            platform=PLATFORM,
            backend=PLATFORM,
            max_batch_size=0,
            input=[
                pb.ModelInput(name=n, data_type=_CONFIG_TYPES[t], dims=s, optional=o)
                for n, t, s, o in _INPUTS
            ],
            output=[
                pb.ModelOutput(name=n, data_type=_CONFIG_TYPES[t], dims=s) for n, t, s in _OUTPUTS
            ],
            model_transaction_policy=pb.ModelTransactionPolicy(decoupled=True),
        )
    )
