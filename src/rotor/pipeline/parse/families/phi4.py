"""phi4 — Phi-4-mini: `functools[{"name": f, "arguments": {...}}, ...]`, one
JSON list for all calls. `functools` is plain text, not a special token, and
has no closing marker: the list ends the section, and text after it is
content. `functools` not followed by `[` (`functools.partial`) is content."""

from __future__ import annotations

from rotor.pipeline.parse.families._json_section import JsonValueSectionParser


class Phi4Parser(JsonValueSectionParser):
    name = "phi4"
    start_markers = ("functools",)
    # Anything but a list right after `functools` (`functools{`, `functools.`)
    # ends the section at once, empty: it is rejected and the text stays content.
    opens = "["
