"""rotor's EngineRequest as vLLM `SamplingParams`: token ids out, no text.

vLLM never detokenizes and never sees a stop string (rotor's decoder owns
stops); it gets the user's stop token ids and the model's EOS ids as stop
token ids, so its finish names the id that ended a choice. A constraint in
`sampling.guided` becomes vLLM's `StructuredOutputsParams`.

vLLM 0.32 reads a structural tag that has a `structures` key in xgrammar's
deprecated shape (begin / schema / end items). rotor's turn grammar carries
`structures` and `triggers` for readers of the old shape, but its `format` is
the whole grammar in xgrammar's current shape, so vLLM gets the `format` alone.
A client's own `structured_outputs.structural_tag` (type
"client_structural_tag") goes to vLLM as the client wrote it, and the
structured_outputs options (whitespace_pattern, disable_*) ride along.
"""

from __future__ import annotations

import json
from typing import Any

from rotor.protocol.engine import EngineError, EngineRequest


def structured_outputs(guided: dict[str, Any] | None) -> Any:
    """vLLM's StructuredOutputsParams for a rotor constraint (None: unconstrained)."""
    if guided is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    options = guided.get("options") or {}
    kind = guided.get("type")
    if kind == "json_schema":
        schema = guided.get("json_schema")
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError:
                raise EngineError(
                    "guided_json is not valid JSON", "refused", "guided_json"
                ) from None
        return StructuredOutputsParams(json=schema, **options)
    if kind == "regex":
        return StructuredOutputsParams(regex=guided["regex"], **options)
    if kind == "choice":
        return StructuredOutputsParams(choice=list(guided["choice"]), **options)
    if kind == "grammar":
        return StructuredOutputsParams(grammar=guided["grammar"], **options)
    if kind == "client_structural_tag":  # a structured_outputs client's, as vLLM takes it
        return StructuredOutputsParams(structural_tag=guided["structural_tag"], **options)
    if kind == "structural_tag":
        tag = {"type": "structural_tag", "format": guided["format"]}
        return StructuredOutputsParams(structural_tag=json.dumps(tag))
    raise EngineError(f"unknown decoding constraint {kind!r}", "refused", "guided_json")


def sampling_params(request: EngineRequest, kv_transfer: dict[str, Any] | None = None) -> Any:
    """The vLLM SamplingParams for `request` (deltas of token ids, no text);
    `kv_transfer` is what its KV connector reads (disagg.py), None for most."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    s, stop, out = request.sampling, request.stop, request.output
    stop_ids = list(dict.fromkeys([*stop.stop_token_ids, *stop.eos_token_ids]))
    if stop.ignore_eos:
        stop_ids = list(stop.stop_token_ids)
    return SamplingParams(
        n=request.n,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k if s.top_k > 0 else 0,
        min_p=s.min_p,
        seed=s.seed,
        presence_penalty=s.presence_penalty,
        frequency_penalty=s.frequency_penalty,
        repetition_penalty=s.repetition_penalty,
        max_tokens=stop.max_tokens,
        min_tokens=stop.min_tokens,
        stop_token_ids=stop_ids,
        ignore_eos=stop.ignore_eos,
        logprobs=out.top_logprobs if out.logprobs else None,
        prompt_logprobs=out.prompt_logprobs,
        detokenize=False,
        skip_special_tokens=False,
        output_kind=RequestOutputKind.DELTA,
        structured_outputs=structured_outputs(s.guided),
        extra_args={"kv_transfer_params": kv_transfer} if kv_transfer is not None else None,
    )
