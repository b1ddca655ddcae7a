"""nemotron_deci — Llama-Nemotron (Deci architecture): `<TOOLCALL>[{"name": f, "arguments": {...}}, ...]</TOOLCALL>`;
the list holds the parallel calls (a bare object is taken as a list of one)."""

from __future__ import annotations

from rotor.pipeline.parse.families._json_section import JsonCallsParser


class NemotronDeciParser(JsonCallsParser):
    name = "nemotron_deci"
    # vLLM decodes this family with skip_special_tokens=False: the markers are
    # added tokens in the Nemotron tokenizers.
    needs_special_tokens = True
    start_markers = ("<TOOLCALL>",)
    end_markers = ("</TOOLCALL>",)
