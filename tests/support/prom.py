"""Readers of what Prometheus reads: the text exposition a rotor process
serves on /metrics, and PromQL expressions, as far as a dashboard's and an
alert rule's checks need (metric names, label matchers, grouping labels,
functions). Small on purpose: promtool is a Go binary, not a test
dependency."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import httpx

# --- Prometheus text exposition ------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
# the sample names a family of each type exposes
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "untyped": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}


@dataclass
class Family:
    name: str  # as exposed: a counter's ends in _total
    type: str
    help: str = ""
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    @property
    def sample_names(self) -> set[str]:
        return {self.name + s for s in _SUFFIXES[self.type]}


def parse_exposition(text: str) -> dict[str, Family]:
    """The families of one scrape; a sample that belongs to no family, or a
    family declared twice, is a format error."""
    families: dict[str, Family] = {}
    helps: dict[str, str] = {}
    current: Family | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            helps[name] = doc
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert name not in families, f"{name} declared twice"
            assert kind in _SUFFIXES, f"{name}: unknown type {kind}"
            current = families[name] = Family(name, kind, helps.get(name, ""))
        elif line.startswith("#"):
            continue
        else:
            m = _SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            assert current is not None and m.group(1) in current.sample_names, (
                f"sample {m.group(1)} outside its family"
            )
            labels = dict(_LABEL_PAIR.findall(m.group(2) or ""))
            current.samples.append((m.group(1), labels, float(m.group(3))))
    return families


@dataclass
class Scrape:
    """One process's /metrics: what PromQL can name, and which labels they carry."""

    families: dict[str, Family]

    @property
    def names(self) -> set[str]:
        return {n for f in self.families.values() for n in f.sample_names}

    @property
    def sampled(self) -> dict[str, set[str]]:
        """Sample name → the label names its samples carry (names with samples only)."""
        out: dict[str, set[str]] = {}
        for f in self.families.values():
            for name, labels, _ in f.samples:
                out.setdefault(name, set()).update(labels)
        return out

    def value(self, name: str, **labels: str) -> float:
        return sum(
            v
            for f in self.families.values()
            for n, have, v in f.samples
            if n == name and all(have.get(k) == want for k, want in labels.items())
        )


def scrape(url: str) -> Scrape:
    r = httpx.get(url + "/metrics", timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape(parse_exposition(r.text))


# --- PromQL: names, labels, functions ---------------------------------------------------------

AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "double_exponential_smoothing", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate",
    "label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time",
    "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
    "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn",
    "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt",
    "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp",
    "vector", "year",
}  # fmt: skip
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = GROUPING | {"bool", "offset", "and", "or", "unless", "atan2"}
MATCH_OPS = {"=", "!=", "=~", "!~"}

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<var>\$\{[^}]*\}|\$[A-Za-z_]\w*)
  | (?P<number>0[xX][0-9a-fA-F]+
      |(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^=<>(){},@])
    """,
    re.X,
)


@dataclass
class Selector:
    metric: str  # "" for a selector without a name ({job="x"})
    matchers: list[tuple[str, str, str]]  # (label, op, value without quotes)
    within: str = ""  # the function whose parentheses hold it directly ("" for none)


@dataclass
class Parsed:
    selectors: list[Selector]
    grouping: list[str]  # labels of by / without / on / ignoring / group_left / group_right
    functions: list[str]  # functions and aggregations called
    by: list[str]  # the labels of `by (...)` alone: what an aggregation keeps

    @property
    def metrics(self) -> list[str]:
        return [s.metric for s in self.selectors if s.metric]


def tokenize(expr: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"unexpected {expr[pos : pos + 10]!r} at {pos}")
        if m.lastgroup != "space":
            tokens.append((m.lastgroup or "", m.group()))
        pos = m.end()
    return tokens


def _balanced(tokens: list[tuple[str, str]]) -> None:
    stack: list[str] = []
    pairs = {")": "(", "}": "{"}
    for kind, text in tokens:
        if kind == "op" and text in "({":
            stack.append(text)
        elif kind == "op" and text in ")}" and (not stack or stack.pop() != pairs[text]):
            raise ValueError(f"unbalanced {text!r}")
    if stack:
        raise ValueError(f"unclosed {stack[-1]!r}")


def _matchers(tokens: list[tuple[str, str]], i: int) -> tuple[list[tuple[str, str, str]], int]:
    """The matchers of the `{...}` that starts at tokens[i]; the index after it."""
    found: list[tuple[str, str, str]] = []
    i += 1
    while tokens[i][1] != "}":
        (k1, label), (_, op), (k3, value) = tokens[i : i + 3]
        if k1 != "ident" or op not in MATCH_OPS or k3 != "string":
            raise ValueError(f"not a label matcher: {label} {op} {value}")
        found.append((label, op, value[1:-1]))
        i += 3
        if tokens[i][1] == ",":
            i += 1
    return found, i + 1


def parse_promql(expr: str) -> Parsed:
    """What an expression names. Identifiers followed by `(` are functions;
    those inside `{}` and after by / without / on / ignoring / group_* are
    labels; strings, ranges (`[5m]`, `[$__rate_interval]`), numbers,
    durations and keywords are none of them; every other identifier is a
    metric name."""
    tokens = tokenize(expr)
    _balanced(tokens)
    parsed = Parsed([], [], [], [])
    opened: list[str] = []  # per open parenthesis: the function it calls, or ""
    called = ""  # the function just named, whose "(" comes next
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        after = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        within = opened[-1] if opened else ""
        if kind == "op" and text == "{":
            matchers, i = _matchers(tokens, i)
            parsed.selectors.append(Selector("", matchers, within))
            continue
        if kind == "op" and text in "()":
            if text == "(":
                opened.append(called)
            else:
                opened.pop()
            called = ""
        if kind != "ident":
            i += 1
            continue
        low = text.lower()
        if low in GROUPING:
            i += 1
            if i < len(tokens) and tokens[i][1] == "(":
                i += 1
                while tokens[i][1] != ")":
                    if tokens[i][0] == "ident":
                        parsed.grouping.append(tokens[i][1])
                        if low == "by":
                            parsed.by.append(tokens[i][1])
                    elif tokens[i][1] != ",":
                        raise ValueError(f"not a label list after {text}: {tokens[i][1]!r}")
                    i += 1
                i += 1
            continue
        if low in KEYWORDS or low in ("inf", "nan"):
            i += 1
            continue
        if after == "(" or (text in AGGREGATIONS and after.lower() in ("by", "without")):
            parsed.functions.append(text)
            called = text if after == "(" else ""
            i += 1
            continue
        i += 1
        matchers: list[tuple[str, str, str]] = []
        if i < len(tokens) and tokens[i][1] == "{":
            matchers, i = _matchers(tokens, i)
        parsed.selectors.append(Selector(text, matchers, within))
    return parsed


# --- what the deploy files hold ----------------------------------------------------------------
