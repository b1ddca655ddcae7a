"""Which modules a real rotor process imports: `WATCHED` runs rotor's command
line (`rotor_server(..., launcher=WATCHED)`) with a finder first on
`sys.meta_path` that writes one line to stderr the first time a module of
OpenTelemetry's SDK or exporters is looked for (what rotor's tracing loads;
OpenTelemetry's API package may come with the web framework: FastAPI 0.165
and later import it), so a test reads it in the process's log.
Every import of a module not yet loaded asks the meta path's finders first,
whoever imports it (an `import` statement, importlib, any thread), from the
process's start to its end; the finder finds nothing itself."""

from __future__ import annotations

MARK = "imported opentelemetry: "

_CODE = f"""
import sys

_WATCHED = (["opentelemetry", "sdk"], ["opentelemetry", "exporter"])


class _Watch:
    said = False

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if not cls.said and name.split(".")[:2] in _WATCHED:
            cls.said = True
            sys.stderr.write({MARK!r} + name + "\\n")
            sys.stderr.flush()
        return None


sys.meta_path.insert(0, _Watch)
from rotor.cli import main

sys.exit(main(sys.argv[1:]))
"""

WATCHED = ("-c", _CODE)
