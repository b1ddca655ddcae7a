"""step3 — StepFun Step-3: one calls section of call blocks, each a typed
header and one StepTML invoke,

    <｜tool_calls_begin｜>
    <｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f">
    <steptml:parameter name="a">1</steptml:parameter>
    </steptml:invoke><｜tool_call_end｜>
    <｜tool_calls_end｜>

The type before the separator is always `function` and is not checked. The
`function<｜tool_sep｜>` header may be missing (vLLM's streaming parser reads
such blocks), and the model may echo the function's name between the header
and the invoke (`function<｜tool_sep｜>f\n<steptml:invoke name="f">`); any
other text there is malformed. Values are text, whitespace and all (it sits
inline between the tags), typed by the tool's schema."""

from __future__ import annotations

from rotor.pipeline.parse.base import ToolCall, plain_name
from rotor.pipeline.parse.families._json_section import BlockSectionParser
from rotor.pipeline.parse.families._xml import attr_name, elements, typed_arguments

SEP = "<｜tool_sep｜>"
_INVOKE, _INVOKE_END = "<steptml:invoke", "</steptml:invoke>"
_PARAM, _PARAM_END = "<steptml:parameter", "</steptml:parameter>"


class Step3Parser(BlockSectionParser):
    name = "step3"
    # The fullwidth-bar markers are special tokens of Step-3's tokenizer.
    needs_special_tokens = True
    start_markers = ("<｜tool_calls_begin｜>",)
    end_markers = ("<｜tool_calls_end｜>",)
    call_begin = "<｜tool_call_begin｜>"
    call_end = "<｜tool_call_end｜>"

    def parse_call(self, block: str) -> ToolCall | None:
        start = block.find(_INVOKE)
        if start < 0:
            return None
        # A separator inside the invoke (in a value) is no header.
        sep = block.find(SEP, 0, start)
        lead = block[sep + len(SEP) if sep >= 0 else 0 : start]
        if lead.strip() and plain_name(lead) is None:
            return None
        invokes = elements(block[start:], _INVOKE, _INVOKE_END)
        if not invokes or len(invokes) != 1:
            return None
        head, inner = invokes[0]
        name = attr_name(head)
        params = elements(inner, _PARAM, _PARAM_END)
        if name is None or params is None:
            return None
        pairs: list[tuple[str, str]] = []
        for param_head, value in params:
            key = attr_name(param_head)
            if key is None:
                return None
            pairs.append((key, value))
        return ToolCall(name=name, arguments=typed_arguments(self.tools, name, pairs))
