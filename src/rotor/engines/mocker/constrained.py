"""Output that satisfies a decoding constraint, for the mocker.

A simulator must not answer `guided_json` or a forced tool call with random
text: it writes a value the constraint admits instead — a JSON value built
from the schema, one of the `guided_choice` strings — and refuses (a 400
naming the field) what it cannot satisfy honestly: regexes, grammars,
whitespace patterns, and structural tags (Beam's or a client's). Values are seeded, so the same seed gives the same text.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from rotor.protocol.engine import EngineError

WORDS = ("alpha", "river", "stone", "quiet", "maple", "cloud", "ember", "north", "lumen")
MAX_DEPTH = 8  # nesting past this gets the smallest value its type allows


def refuse_unsupported(guided: dict[str, Any] | None) -> None:
    """Raise the refusal for a constraint the mocker cannot satisfy."""
    kind = (guided or {}).get("type")
    if kind == "regex":
        raise EngineError(
            "the mocker cannot satisfy a regex (guided_regex, structured_outputs.regex); "
            "send a `mock` script instead",
            "refused",
            "guided_regex",
        )
    if kind == "grammar":
        raise EngineError(
            "the mocker cannot satisfy structured_outputs.grammar; send a `mock` script instead",
            "refused",
            "structured_outputs.grammar",
        )
    if kind == "client_structural_tag":
        raise EngineError(
            "the mocker cannot satisfy structured_outputs.structural_tag; "
            "send a `mock` script instead",
            "refused",
            "structured_outputs.structural_tag",
        )
    if "whitespace_pattern" in (guided or {}).get("options", {}):
        # (disable_any_whitespace holds already: its JSON is compact; and it
        # writes no property its schema does not declare)
        raise EngineError(
            "the mocker cannot satisfy structured_outputs.whitespace_pattern; "
            "send a `mock` script instead",
            "refused",
            "structured_outputs.whitespace_pattern",
        )
    if kind == "structural_tag":
        raise EngineError(
            "the mocker cannot satisfy a structural tag (Beam's turn grammar); "
            "send a `mock` script or turn_grammar: false",
            "refused",
            "tools",
        )


def constrained_text(guided: dict[str, Any], rng: random.Random) -> str | None:
    """The text of one answer under `guided`; None when it constrains nothing
    the mocker handles (the seeded random tokens then stand)."""
    kind = guided.get("type")
    if kind == "choice":
        choices = guided.get("choice") or [""]
        return str(rng.choice(choices))  # strings, unless a peer sent otherwise
    if kind == "json_schema":
        schema = guided.get("json_schema")
        if isinstance(schema, str):
            schema = orjson.loads(schema)
        value = JSONMaker(schema if isinstance(schema, dict) else {}, rng).make()
        return orjson.dumps(value).decode()
    return None


class JSONMaker:
    """A JSON value for a schema: type, enum/const, anyOf/oneOf/allOf,
    properties/required, items/minItems/maxItems, bounds, local $ref."""

    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def make(self) -> Any:
        return self.value(self.root, 0)

    def value(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict):
            return self._word()
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self.value(self.rng.choice(schema[key]), depth + 1)
        if schema.get("allOf"):
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                if isinstance(part, dict):
                    merged.update(part)
            return self.value(merged, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in schema else "string"
        maker = _MAKERS.get(kind, JSONMaker._string)
        return maker(self, schema, depth)

    def _resolve(self, ref: Any) -> Any:
        node: Any = self.root
        if not isinstance(ref, str) or not ref.startswith("#"):
            return {}
        for part in ref.lstrip("#").strip("/").split("/"):
            if not part:
                continue
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node

    def _word(self) -> str:
        return self.rng.choice(WORDS)

    def _string(self, schema: dict[str, Any], depth: int) -> str:
        text = self._word()
        low = schema.get("minLength", 0)
        high = schema.get("maxLength")
        while len(text) < low:
            text += " " + self._word()
        return text[:high] if isinstance(high, int) else text

    def _number(self, schema: dict[str, Any], depth: int) -> float:
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        high = schema.get("maximum", schema.get("exclusiveMaximum", low + 100))
        return round(self.rng.uniform(low, high), 2) if high > low else float(low)

    def _integer(self, schema: dict[str, Any], depth: int) -> int:
        low = int(schema.get("minimum", 0))
        if "exclusiveMinimum" in schema:
            low = int(schema["exclusiveMinimum"]) + 1
        high = int(schema.get("maximum", low + 100))
        if "exclusiveMaximum" in schema:
            high = int(schema["exclusiveMaximum"]) - 1
        return self.rng.randint(low, max(low, high))

    def _boolean(self, schema: dict[str, Any], depth: int) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict[str, Any], depth: int) -> None:
        return None

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        low = schema.get("minItems", 0)
        high = schema.get("maxItems", max(low, 3))
        count = low if depth >= MAX_DEPTH else self.rng.randint(low, max(low, min(high, low + 3)))
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", {})
        return [
            self.value(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(count)
        ]

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties") or {}
        required = schema.get("required") or []
        names = list(props) if depth < MAX_DEPTH else [n for n in props if n in required]
        out = {name: self.value(props[name], depth + 1) for name in names}
        for name in required:
            if name not in out:
                out[name] = self._word()
        return out


_MAKERS = {
    "string": JSONMaker._string,
    "number": JSONMaker._number,
    "integer": JSONMaker._integer,
    "boolean": JSONMaker._boolean,
    "null": JSONMaker._null,
    "array": JSONMaker._array,
    "object": JSONMaker._object,
}
