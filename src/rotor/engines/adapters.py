"""The LoRA adapters an engine holds, and which of them running requests use.

Both engines that take adapters (the mocker and vLLM) keep the same book:
names → checked adapters (model/lora.py), a count of the running requests
that use each, and the adapters unloaded while in use, which stay until
their last request ends (then `on_drop` frees them in the engine). A new
request can name only an adapter that is loaded and not being unloaded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rotor.model.lora import Adapter, AdapterError, read_adapter
from rotor.protocol.engine import EngineError


class AdapterBook:
    def __init__(self, on_drop: Callable[[Adapter], None] | None = None) -> None:
        self.loaded: dict[str, Adapter] = {}
        self._in_use: Counter[str] = Counter()
        self._leaving: dict[str, Adapter] = {}  # unloaded, still in use
        self._on_drop = on_drop

    def names(self) -> dict[str, str]:
        return {name: a.path for name, a in self.loaded.items()}

    def leaving(self) -> list[str]:
        """The adapters unloaded while requests still use them."""
        return list(self._leaving)

    def check(self, name: str, path: str) -> Adapter:
        """The adapter to load under `name`, checked; EngineError (refused)
        naming the field or file at fault."""
        if name in self.loaded:
            raise EngineError(f"the adapter {name!r} is already loaded", "refused", "lora_name")
        if name in self._leaving:
            raise EngineError(
                f"the adapter {name!r} is being unloaded (its last requests run): try again",
                "refused",
                "lora_name",
            )
        try:
            return read_adapter(name, path)
        except AdapterError as e:
            raise EngineError(e.message, "refused", e.param) from None

    def add(self, adapter: Adapter) -> None:
        self.loaded[adapter.name] = adapter

    def remove(self, name: str) -> None:
        """No new request may use it; the engine frees it once none does."""
        adapter = self.loaded.pop(name, None)
        if adapter is None:
            raise EngineError(f"no adapter {name!r} is loaded", "refused", "lora_name")
        if self._in_use[name]:
            self._leaving[name] = adapter
        elif self._on_drop is not None:
            self._on_drop(adapter)

    def get(self, name: str) -> Adapter:
        """A loaded adapter a new request names; EngineError naming `model`."""
        adapter = self.loaded.get(name)
        if adapter is None:
            raise EngineError(f"the adapter {name!r} is not loaded here", "refused", "model")
        return adapter

    @contextmanager
    def using(self, name: str | None) -> Iterator[Adapter | None]:
        """The request's adapter (None: the base model) for as long as it runs."""
        if name is None:
            yield None
            return
        adapter = self.get(name)
        self._in_use[name] += 1
        try:
            yield adapter
        finally:
            self._in_use[name] -= 1
            if not self._in_use[name]:
                del self._in_use[name]
                leaving = self._leaving.pop(name, None)
                if leaving is not None and self._on_drop is not None:
                    self._on_drop(leaving)
