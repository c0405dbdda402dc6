"""A key's production (lib.cache.production.Production), step by step, on real parts: the
disk tier and the lock store are diskcache stores on disk, shared by "processes" that
each have their own memory tier, writer thread and flights (as two processes on one host
do); the engine is a slow fake that counts its calls. Each test names the step it would
catch the removal of: the local flight, the lease, the re-check after taking it, the
production under the lease, the write (durable or not), the release after the write."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lib.cache.entry import CachedAudio, pack
from lib.cache.leases import NO_LEASE, DiskLeases, Renewer
from lib.cache.production import Production, current_lease
from lib.cache.store import AudioStore
from lib.cache.tiers import SharedStore, Tiers
from lib.cache.writer import Writer
from lib.config import load_config
from lib.errors import EngineError

KEY = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"


def entry(key: str = KEY, level: int = 8000) -> CachedAudio:
    pcm = (np.sin(np.arange(4410) / 5.0) * level).astype(np.int16)
    return CachedAudio.from_pcm(key, pcm, 22_050, {"engine": "fake", "tag": "fake:1", "expires": None})


class CountingLeases(DiskLeases):
    """The real lock store, counting how often it is asked for a lease."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.acquired = 0

    def acquire(self, key: str, lease: float) -> str | None:
        self.acquired += 1
        return super().acquire(key, lease)


class GatedStore(AudioStore):
    """The real disk tier, whose writes wait for ``gate`` (the test says when the disk
    write happens)."""

    gate: threading.Event | None = None

    def put_blob(self, key: str, blob: bytes, *, tag: str, ttl: float | None, origin: str = "user") -> bool:
        if self.gate is not None:
            self.gate.wait(30)
        return super().put_blob(key, blob, tag=tag, ttl=ttl, origin=origin)


class GatedShared:
    """A shared tier (the SharedStore seam) in a dict, whose puts wait for ``gate``."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.blobs: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.blobs.get(key)

    def put(self, key: str, blob: bytes, ttl: float | None = None) -> bool:
        self.gate.wait(30)
        self.blobs[key] = blob
        return True

    def corrupt(self, key: str, exc: BaseException) -> None:
        self.blobs.pop(key, None)

    def delete(self, key: str) -> bool:
        return self.blobs.pop(key, None) is not None

    def clear(self) -> int:
        n = len(self.blobs)
        self.blobs.clear()
        return n

    def evict(self, tag: str) -> int | None:
        return None


class Process:
    """One process's production over ``root``: the disk tier and the lock store are
    files shared with every other Process on the same ``root``."""

    def __init__(self, root: Path, *, lease: float = 5.0, shared: SharedStore | None = None) -> None:
        config = load_config(
            env={}, overrides={"engine": "tone", "cache.dir": str(root), "cache.lock_lease": lease}
        ).cache
        self.store = GatedStore(config, root / "audio", lambda op, exc: None)
        self.writer = Writer()
        self.tiers = Tiers(config, self.store, shared, self.writer)
        self.leases = CountingLeases(str(root / "locks"))
        self.renewer = Renewer(self.leases, lease)
        self.lock_errors: list[BaseException] = []
        self.production = Production(self.tiers, self.leases, self.renewer, config, self.lock_errors.append)

    def close(self) -> None:
        if self.store.gate is not None:
            self.store.gate.set()
        self.writer.close()
        self.renewer.stop()
        self.leases.close()
        self.store.close()


class SlowEngine:
    """``engine(key)`` is a produce function: counts the call, takes ``seconds``."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, key: str = KEY) -> Callable[[], CachedAudio]:
        def produce() -> CachedAudio:
            with self._lock:
                self.calls += 1
            time.sleep(self.seconds)
            return entry(key)

        return produce


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    made: list[Process] = []

    def make(**kwargs: Any) -> Process:
        made.append(Process(tmp_path / "cache", **kwargs))
        return made[-1]

    yield make
    for p in made:
        p.close()


def in_threads(n: int, fn: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * n
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait()
        results[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def wait_for(condition: Callable[[], bool], limit: float = 20.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


# -- 1. the local flight ----------------------------------------------------------------


def test_threads_of_one_process_share_one_flight_and_ask_the_lock_store_once(
    processes: Callable[..., Process],
) -> None:
    p = processes()
    engine = SlowEngine(0.3)
    results = in_threads(4, lambda i: p.production.make(KEY, engine()))
    assert engine.calls == 1
    assert sorted(made for _, made in results) == [False, False, False, True]
    assert len({e.wav for e, _ in results}) == 1
    # The mechanism: the followers waited inside this process, never for the lease.
    assert p.leases.acquired == 1


# -- 2. the lease across processes ------------------------------------------------------


def test_a_second_process_waits_for_the_lease_holder_and_takes_its_entry(processes: Callable[..., Process]) -> None:
    a, b = processes(), processes()
    engine = SlowEngine(0.5)
    first: Future[tuple[CachedAudio, bool]] = Future()
    threading.Thread(target=lambda: first.set_result(a.production.make(KEY, engine()))).start()
    assert wait_for(lambda: engine.calls == 1)  # a holds the lease and is producing
    assert b.leases.held(KEY)
    found, made_here = b.production.make(KEY, engine())
    assert made_here is False and engine.calls == 1
    made, made_there = first.result(30)
    assert made_there is True and found.wav == made.wav
    assert b.leases.acquired >= 1  # b asked for the lease and found it taken


def test_a_production_that_stores_nothing_takes_no_lease(processes: Callable[..., Process]) -> None:
    p = processes()
    engine = SlowEngine(0.3)
    results = in_threads(3, lambda i: p.production.make(KEY, engine(), store=False))
    assert engine.calls == 1 and sorted(made for _, made in results) == [False, False, True]
    assert p.leases.acquired == 0  # nothing in the lock store: no trace of the key
    p.writer.flush()
    assert p.tiers.find(KEY) is None


# -- 3. the re-check after taking the lease ---------------------------------------------


def test_the_leader_looks_again_after_taking_the_lease(processes: Callable[..., Process]) -> None:
    """Another process stored the entry and released its lease between this one's last
    look and its lease: the new leader finds it and never runs the engine."""
    other, p = processes(), processes()
    stored = entry(level=3000)
    other.store.put_blob(KEY, pack(stored), tag="fake:1", ttl=None)
    engine = SlowEngine()
    found, made_here = p.production.make(KEY, engine())
    assert (made_here, engine.calls) == (False, 0)
    assert found.wav == stored.wav
    assert p.leases.acquired == 1 and not p.leases.held(KEY)  # the lease taken for the re-check is released


# -- 4. producing under the lease -------------------------------------------------------


def test_the_production_runs_under_its_lease_and_a_nested_unstored_one_under_the_same(
    processes: Callable[..., Process],
) -> None:
    p = processes()
    seen: dict[str, Any] = {}

    def inner() -> CachedAudio:
        seen["inner"] = current_lease()
        return entry(OTHER)

    def outer() -> CachedAudio:
        lease = seen["outer"] = current_lease()
        seen["token on disk"] = p.leases._call("held", lambda c: c.get(KEY))
        # A sentence made inside a result and not stored: no lease of its own.
        p.production.make(OTHER, inner, store=False)
        lease.renew_until(time.monotonic() + 60)  # what the engine watchdog does
        seen["bound"] = p.renewer._bounds.get(KEY)
        return entry()

    p.production.make(KEY, outer)
    assert seen["outer"].key == KEY and seen["outer"].token == seen["token on disk"]
    assert seen["inner"] is seen["outer"]  # its engine call bounds the result's lease
    assert seen["bound"] is not None  # the renewer honours the bound of the lease produced under
    assert current_lease() is NO_LEASE


def test_a_failed_production_stores_nothing_and_lets_the_key_go(processes: Callable[..., Process]) -> None:
    p = processes()

    def failing() -> CachedAudio:
        raise EngineError("the fake engine failed")

    with pytest.raises(EngineError):
        p.production.make(KEY, failing)
    assert not p.leases.held(KEY)
    p.writer.flush()
    assert p.tiers.find(KEY) is None
    engine = SlowEngine()
    _, made_here = p.production.make(KEY, engine())
    assert made_here and engine.calls == 1


def test_a_broken_lock_store_degrades_to_this_process(processes: Callable[..., Process]) -> None:
    p = processes()

    def broken(key: str, lease: float) -> str | None:
        raise OSError("the lock store is unavailable")

    p.leases.acquire = broken  # type: ignore[method-assign]
    engine = SlowEngine()
    _, made_here = p.production.make(KEY, engine())
    assert made_here and engine.calls == 1 and len(p.lock_errors) == 1
    p.writer.flush()
    assert p.store.contains(KEY)  # still stored


# -- 5. the write, 6. the release -------------------------------------------------------


def test_the_lease_is_released_only_once_the_write_reached_disk(processes: Callable[..., Process]) -> None:
    """Another process watches the lock store and the disk: it never sees the key neither
    leased nor stored (it would run the engine again)."""
    p, watcher = processes(), processes()
    p.store.gate = threading.Event()
    seen: list[tuple[bool, bool]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append((watcher.leases.held(KEY), watcher.store.contains(KEY)))

    observer = threading.Thread(target=watch)
    observer.start()
    try:
        made, made_here = p.production.make(KEY, SlowEngine()())
        assert made_here and p.tiers.memory_entry(KEY) is made  # served from memory at once
        assert p.leases.held(KEY) and not watcher.store.contains(KEY)  # the write waits at the gate
        assert wait_for(lambda: (True, False) in seen)  # seen while the write waits (not only before make)
        p.store.gate.set()
        assert wait_for(lambda: not p.leases.held(KEY), 30)
    finally:
        stop.set()
        observer.join(30)
    assert (True, False) in seen  # the watcher saw the write pending under the lease
    assert (False, False) not in seen[seen.index((True, False)) :]
    assert watcher.store.contains(KEY) and watcher.store.get(KEY) is not None


def test_the_lease_waits_for_the_shared_tier_too(processes: Callable[..., Process]) -> None:
    shared = GatedShared()
    p = processes(shared=shared)
    p.production.make(KEY, SlowEngine()())
    assert wait_for(lambda: p.store.contains(KEY))  # on disk ...
    assert p.leases.held(KEY) and KEY not in shared.blobs  # ... but not yet where other replicas look
    shared.gate.set()
    assert wait_for(lambda: not p.leases.held(KEY))
    assert KEY in shared.blobs


def test_a_durable_entry_is_on_disk_when_make_returns(processes: Callable[..., Process]) -> None:
    p, other = processes(), processes()
    writer_free = threading.Event()
    p.writer.submit(lambda: writer_free.wait(30))  # the writer thread is busy
    try:
        p.production.make(KEY, SlowEngine()(), durable=True)
        assert other.store.get(KEY) is not None  # written before returning, not by the writer
        assert not p.leases.held(KEY)  # no shared tier: nothing left to wait for
        p.production.make(OTHER, SlowEngine()(OTHER))
        assert not other.store.contains(OTHER) and p.leases.held(OTHER)  # not durable: behind the writer
    finally:
        writer_free.set()
    assert wait_for(lambda: not p.leases.held(OTHER))
    assert other.store.contains(OTHER)


def test_keep_knows_no_lease_and_reports_when_the_write_is_done(processes: Callable[..., Process]) -> None:
    shared = GatedShared()
    p = processes(shared=shared)
    stored = p.tiers.keep(entry(), durable=True)
    assert p.store.contains(KEY) and not stored.done()  # the shared tier still to come
    shared.gate.set()
    stored.result(30)
    assert KEY in shared.blobs
