"""A thread-safe LRU bounded in bytes: the memory tier, the transcode cache and the
voice-profile cache are all one of these."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ByteLRU"]

K = TypeVar("K")
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    """Least-recently-used mapping whose total ``size_of(value)`` stays within
    ``budget`` bytes. A value larger than the whole budget is not kept at all."""

    def __init__(self, budget: int, size_of: Callable[[V], int]) -> None:
        self.budget = budget
        self._size_of = size_of
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.on_evict: Callable[[K, V], None] | None = None
        """Called (outside the lock) for each value pushed out by the budget."""

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: K, value: V) -> None:
        size = self._size_of(value)
        evicted: list[tuple[K, V]] = []
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.budget:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.budget:
                k, (v, s) = self._items.popitem(last=False)
                self._bytes -= s
                evicted.append((k, v))
        if self.on_evict is not None:
            for k, v in evicted:
                self.on_evict(k, v)

    def pop(self, key: K) -> V | None:
        with self._lock:
            item = self._items.pop(key, None)
            if item is None:
                return None
            self._bytes -= item[1]
            return item[0]

    def discard_where(self, predicate: Callable[[K], bool]) -> int:
        """Drop every key for which ``predicate(key)`` is true; return how many."""
        with self._lock:
            doomed = [k for k in self._items if predicate(k)]
            for k in doomed:
                self._bytes -= self._items.pop(k)[1]
            return len(doomed)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return self._bytes
