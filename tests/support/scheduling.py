"""How `pytest -n N` shares the suite out: one test module to one worker.

Modules start their servers and engines once (module-scoped fixtures), so a
module split across two workers starts them twice and, worse, a test that
reads what an earlier test of its module left (a counter, a cache) sees
nothing on the other worker. pytest-xdist's `--dist loadgroup` was meant to
keep tests/vllm together, but since pytest 9.2 the group it writes into a
test's `_nodeid` no longer reaches `nodeid`, so every module was split. This
scheduler groups by file, and puts every tests/vllm module in one unit: two
vLLM engines starting at once on two cores take minutes each.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

VLLM = "tests/vllm/"


class ModuleScheduling(LoadScopeScheduling):
    """`--dist loadscope` by file, with every tests/vllm module as one unit."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return VLLM if path.startswith(VLLM) else path


def longest_first(items: list[pytest.Item]) -> None:
    """Move the tests/vllm unit, the longest by far, to the front of the collection.

    The scheduler hands units out in collection order; started first, the vLLM
    unit runs beside everything else instead of after it.
    """
    items.sort(key=lambda item: not item.nodeid.startswith(VLLM))
