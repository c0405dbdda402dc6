"""The ``cost-aware`` eviction policy: keep the entries that save the most engine time
per byte, from request frequencies that age, without letting a preload flush the cache.

Why this rule. Under a size limit the cache is a knapsack: an entry occupies ``size``
bytes and is worth (how often it will be asked for) x (what a miss would cost). Keeping
the densest entries maximises the value kept. Two values matter to an operator: the
hit rate (requests answered at once) and the engine seconds saved (what is paid for).
Ranked by ``freq * cost / size`` the cache saves the most engine time but keeps few
long clips; ranked by ``freq / size`` it answers the most requests but keeps long,
expensive clips too rarely. ``bench/bench_hitrate.py`` measured the exponent on cost
(0, 0.5, 1) on Zipf traces; 0.5 -- the geometric mean of the two knapsack densities,
``freq * sqrt(cost) / size`` -- came within a few points of the best of either measure
on both (README, "Eviction").

- **Frequency with ageing**: each user request of a key counts, whether it hit or
  missed, and a request weighs half as much after every ``AGE_EVERY`` x (entries held)
  later user requests, so yesterday's hot phrases fade. The decay is smooth (each
  request weighs ``2**(1/window)`` more than the one before it; all counts are divided
  down once the weight reaches 2), not a halving of integer counts every window:
  halving turned counts of 1 into 0 and made every count a sawtooth, and on the
  bench's held-out seeds the smooth decay kept more of what is asked for again (see
  README, "Eviction"). Counts of keys that were evicted are kept too (down to half a
  request, at most ``_GHOSTS_PER_ENTRY`` per entry), so a phrase that keeps coming
  back earns its place.
- **Preloads are predictions, not requests**: an entry written by a preload starts with
  no count and moves no ageing clock, and it is stored only into free space or in place
  of entries worth nothing (a count below half a request). A preload of many one-off phrases therefore
  replaces only itself and what nobody asks for: the hot set is untouched.
- **Pins**: a list (``preload``, or a template's pieces) can pin its keys. Pinned entries
  are never victims while they are current -- until the same list is pinned again with
  other keys -- and while all pinned entries together stay within ``pin_fraction`` of
  the size limit (beyond it they compete like any other entry, and a warning says so).
  The list :data:`APPROVED_PIN` (operators' approved takes, :mod:`lib.takes`) is held
  hard: its entries count toward that budget but are never victims, even past it (a
  warning says that the budget is exceeded, and the other lists then compete).

This module is pure bookkeeping in memory (thread-safe, no I/O); :mod:`lib.cache.keeper`
ties it to the diskcache store and persists it lazily.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["AGE_EVERY", "APPROVED_PIN", "COST_WEIGHT", "CostAwarePolicy", "pin_digest"]

_LOGGER = logging.getLogger(__name__)

AGE_EVERY = 10
"""A request weighs half after ``AGE_EVERY`` x max(entries, 64) later user requests
(TinyLFU's sample size): long enough to learn a Zipf tail, short enough that a changed
set of announcements takes over within a day's traffic (measured: 7 and 14-20 did
worse on one of the Zipf and shifting traces, see the bench)."""
COST_WEIGHT = 0.5
APPROVED_PIN = "approved-takes"
"""The pinned list of approved takes: never evicted, whatever the budget (see the module)."""
"""Exponent of the engine cost in an entry's density ``freq * cost**w / size``."""
_MIN_WINDOW = 64
_GHOSTS_PER_ENTRY = 8
"""Counts of keys not held are kept up to this many per entry held (then the smallest go)."""
_NOTHING = 0.5
"""A count below this many requests (of today's weight) is worth nothing: a ghost with
less is forgotten, and a preload may replace an entry with less."""


@dataclass
class _Entry:
    size: int
    cost: float


def pin_digest(keys: Iterable[str]) -> str:
    """A short digest of a pinned list's keys (which version of the list is current)."""
    return hashlib.md5("\n".join(sorted(set(keys))).encode()).hexdigest()[:16]


class CostAwarePolicy:
    """Which entries to keep under a byte limit. Callers report what happens to the
    store (:meth:`added`, :meth:`hit`, :meth:`removed`); :meth:`victims` and
    :meth:`admits` answer what to drop and whether a new entry may come in."""

    def __init__(self, *, limit: int = 0, pin_fraction: float = 0.5, cost_weight: float = COST_WEIGHT) -> None:
        self.limit = limit
        """The store's size limit in bytes (the pin budget is a fraction of it)."""
        self.pin_fraction = pin_fraction
        self.cost_weight = cost_weight
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._freq: dict[str, float] = {}
        """Decayed request counts, in units of a request made when ``_weight`` was 1."""
        self._weight = 1.0
        """What the next request adds to its key's count (grows, rather than all counts shrink)."""
        self._window, self._growth = 0, 1.0
        self._heap: list[tuple[float, str]] = []
        self._pins: dict[str, tuple[str, frozenset[str]]] = {}
        self._pinned: dict[str, int] = {}  # key -> number of current lists pinning it
        self._pinned_bytes = 0
        self._hard: frozenset[str] = frozenset()
        """The keys of :data:`APPROVED_PIN`: never victims."""
        self._bytes = 0
        self._over_budget_warned = False
        self.dirty: set[str] = set()
        """Keys whose count changed since :meth:`take_dirty` (for lazy persistence)."""

    # -- what happens to the store ----------------------------------------------------------

    def hit(self, key: str) -> None:
        """A user request found ``key`` (the hit path: a dict update under a lock)."""
        with self._lock:
            self._count(key)

    def added(self, key: str, size: int, cost: float, *, requested: bool = True, freq: float | None = None) -> None:
        """``key`` was written (``requested``: by a user's miss, which counts as a
        request; else by a preload). ``freq`` restores a persisted count."""
        with self._lock:
            old = self._entries.get(key)
            if old is not None:
                self._forget_bytes(key, old)
            entry = self._entries[key] = _Entry(max(1, int(size)), max(0.0, float(cost)))
            self._bytes += entry.size
            if key in self._pinned:
                self._pinned_bytes += entry.size
            if freq is not None:
                self._freq[key] = max(self._freq.get(key, 0.0), float(freq) * self._weight)
            elif requested:
                self._count(key)
            heapq.heappush(self._heap, (self._density(key), key))

    def removed(self, key: str) -> None:
        """``key`` left the store (evicted, deleted, expired). Its count stays."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._forget_bytes(key, entry)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._heap.clear()
            self._pinned_bytes = self._bytes = 0

    # -- decisions --------------------------------------------------------------------------

    def admits(self, key: str, size: int, cost: float, *, requested: bool, free: int) -> bool:
        """Whether a new entry may be stored. A user's entry always may (its first
        request is evidence; refusing it would cost new phrases a second miss), and so
        may a pinned one. A preloaded one otherwise only into ``free`` bytes or in
        place of entries nobody asks for."""
        if requested or size <= free or key in self._pinned:
            return True
        with self._lock:
            chosen = self._choose(size - free, protect=None)
            return all(self._freq.get(key, 0.0) < _NOTHING * self._weight for key in chosen)

    def victims(self, need: int, *, protect: str | None = None) -> list[str]:
        """Keys to evict, least dense first, to free at least ``need`` bytes (fewer if
        not enough are evictable). ``protect`` (the entry just written) is never one.
        The caller deletes them and reports each with :meth:`removed`."""
        with self._lock:
            return self._choose(need, protect=protect)

    def density(self, key: str) -> float:
        with self._lock:
            return self._density(key) if key in self._entries else 0.0

    def frequency(self, key: str) -> float:
        """``key``'s request count, each request weighed by its age (today's weigh 1)."""
        with self._lock:
            return self._freq.get(key, 0.0) / self._weight

    # -- pins -------------------------------------------------------------------------------

    def pin(self, name: str, keys: Iterable[str]) -> str:
        """Make ``keys`` the current pinned set of list ``name`` (replacing its previous
        one); returns the list's digest."""
        new = frozenset(keys)
        digest = pin_digest(new)
        with self._lock:
            _, old = self._pins.get(name, ("", frozenset()))
            for key in old - new:
                self._unpin_one(key)
            for key in new - old:
                self._pinned[key] = self._pinned.get(key, 0) + 1
                if self._pinned[key] == 1 and key in self._entries:
                    self._pinned_bytes += self._entries[key].size
            if name == APPROVED_PIN:
                self._hard = new
            if new:
                self._pins[name] = (digest, new)
            else:
                self._pins.pop(name, None)
        return digest

    def pins(self) -> dict[str, tuple[str, frozenset[str]]]:
        with self._lock:
            return dict(self._pins)

    def pinned(self, key: str) -> bool:
        with self._lock:
            return key in self._pinned

    @property
    def pinned_bytes(self) -> int:
        return self._pinned_bytes

    def _unpin_one(self, key: str) -> None:
        left = self._pinned.get(key, 0) - 1
        if left > 0:
            self._pinned[key] = left
            return
        self._pinned.pop(key, None)
        if key in self._entries:
            self._pinned_bytes -= self._entries[key].size
            heapq.heappush(self._heap, (self._density(key), key))

    # -- state ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def nbytes(self) -> int:
        return self._bytes

    def take_dirty(self) -> dict[str, float]:
        """The counts of held keys changed since the last call (to persist them), as
        :meth:`frequency` gives them."""
        with self._lock:
            out = {key: self._freq.get(key, 0.0) / self._weight for key in self.dirty if key in self._entries}
            self.dirty.clear()
            return out

    # -- internals (lock held) --------------------------------------------------------------

    def _forget_bytes(self, key: str, entry: _Entry) -> None:
        self._bytes -= entry.size
        if key in self._pinned:
            self._pinned_bytes -= entry.size

    def _count(self, key: str) -> None:
        """One request of ``key``: its count grows by the current weight, and the weight
        grows so that this request weighs half of one made a window later. Counts only
        grow between renormalisations, so the lazy heap stays exact."""
        window = AGE_EVERY * max(len(self._entries), _MIN_WINDOW)
        if window != self._window:  # the growth factor is cached: a hit stays a dict update
            self._window, self._growth = window, 2.0 ** (1.0 / window)
        self._weight *= self._growth
        self._freq[key] = self._freq.get(key, 0.0) + self._weight
        if key in self._entries:
            self.dirty.add(key)
        if self._weight >= 2.0:
            self._age()

    def _age(self) -> None:
        """Divide every count by the weight (back to today's units, weight 1); forget
        ghosts worth nothing and the smallest beyond the bound; rebuild the heap (the
        only moment densities go down)."""
        weight, self._weight = self._weight, 1.0
        aged = {key: n / weight for key, n in self._freq.items() if n >= _NOTHING * weight or key in self._entries}
        limit = _GHOSTS_PER_ENTRY * max(len(self._entries), _MIN_WINDOW)
        if len(aged) > limit:
            keep = sorted(aged, key=lambda k: (k not in self._entries, -aged[k]))[:limit]
            aged = {key: aged[key] for key in keep}
        self._freq = aged
        self.dirty.update(key for key in self._entries)
        self._heap = [(self._density(key), key) for key in self._entries]
        heapq.heapify(self._heap)

    def _density(self, key: str) -> float:
        entry = self._entries[key]
        return float(self._freq.get(key, 0) * entry.cost**self.cost_weight / entry.size)

    def _evictable(self, key: str) -> bool:
        if key not in self._pinned:
            return True
        budget = self.pin_fraction * (self.limit or self._bytes)
        if self._pinned_bytes <= budget:
            return False
        if key in self._hard:  # an approved take: over the budget the other lists give way, never it
            self._warn_over_budget()
            return False
        self._warn_over_budget()
        return True

    def _warn_over_budget(self) -> None:
        if not self._over_budget_warned:
            self._over_budget_warned = True
            _LOGGER.warning(
                "pinned entries hold %d bytes, over cache.pin_fraction (%.2f) of the cache; "
                "they are evicted like others until the pinned lists shrink (approved takes never are)",
                self._pinned_bytes, self.pin_fraction,
            )  # fmt: skip

    def _choose(self, need: int, *, protect: str | None) -> list[str]:
        """Pop the least dense current entries until ``need`` bytes; heap entries whose
        density rose since they were pushed (hits) are pushed again with the new one."""
        chosen: list[str] = []
        held: list[tuple[float, str]] = []
        freed = 0
        while freed < need and self._heap:
            density, key = heapq.heappop(self._heap)
            if key not in self._entries or key in chosen:
                continue  # stale: evicted, or already chosen
            current = self._density(key)
            if current > density:
                heapq.heappush(self._heap, (current, key))
                continue
            held.append((density, key))
            if key == protect or not self._evictable(key):
                continue
            chosen.append(key)
            freed += self._entries[key].size
        for item in held:  # chosen ones stay in the heap until removed() (skipped as stale)
            heapq.heappush(self._heap, item)
        return chosen
