"""Redis faults, reproduced for real against a real ``redis-server``: a Redis made slow
under load (``DEBUG SLEEP``, ``CLIENT PAUSE``) never turns into a 5xx or a dropped
connection; opening the breaker never closes a socket another thread is using; every
error class is contained; an out-of-memory Redis is logged once, not per write; an
infinite TTL never breaks a shared write."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from redis_server import RedisServer, require_redis_server

from lib.api import create_app
from lib.cache.entry import CachedAudio, pack
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.shared import Breaker, SharedTier
from tests.api_server import LiveServer

KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(require_redis_server(), extra=("--enable-debug-command", "yes")) as running:
        yield running


def _entry(key: str = KEY, seconds: float = 0.3) -> bytes:
    import numpy as np

    pcm = (np.sin(np.arange(int(22050 * seconds)) / 7.0) * 8000).astype(np.int16)
    return pack(CachedAudio.from_pcm(key, pcm, 22050, {"engine": "tone"}))


def _wait_until(condition: Any, limit: float = 30.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def test_slow_redis_under_load_never_fails_a_request(
    tmp_path: Path, server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    overrides = {
        "engine": "tone", "cache.dir": str(tmp_path / "c"), "voices.prewarm": False,
        "cache.shared_url": server.url,
    }  # fmt: skip
    svc = TTSService(load_config(env={}, overrides=overrides), ToneEngine())
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    answered: list[tuple[float, float]] = []  # (monotonic time answered, seconds taken)
    stop = threading.Event()
    lock = threading.Lock()

    def client(n: int, base: str) -> None:
        with httpx.Client(base_url=base, timeout=30) as c:
            i = 0
            while not stop.is_set():
                text = f"new phrase {n}-{i}" if i % 4 == 0 else f"known phrase {i % 12}"  # misses and hits
                started = time.monotonic()
                try:
                    r = c.post("/api/tts", data={"text": text, "voice": "tone-low"})
                except httpx.HTTPError as exc:  # a dropped connection
                    failures.append(f"{type(exc).__name__}: {exc}")
                    return
                with lock:
                    statuses[r.status_code] += 1
                    answered.append((time.monotonic(), time.monotonic() - started))
                i += 1

    admin = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=30)
    try:
        with caplog.at_level(logging.WARNING), LiveServer(create_app(svc)) as live:
            threads = [threading.Thread(target=client, args=(n, live.url)) for n in range(8)]
            for thread in threads:
                thread.start()
            time.sleep(1.0)
            slept_at = time.monotonic()
            admin.execute_command("DEBUG", "SLEEP", 2)  # Redis answers nobody for 2 s
            woke_at = time.monotonic()
            time.sleep(1.0)
            admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")  # every command stalls 1.5 s
            time.sleep(2.5)
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
            assert _wait_until(lambda: svc.cache.shared is not None and svc.cache.shared.up)  # and back
        assert failures == [], failures[:5]
        assert set(statuses) == {200}, statuses
        during = [took for at, took in answered if slept_at + 0.6 < at < woke_at]
        assert during, "nothing was answered while Redis slept"
        metrics = svc.dashboard.metrics.exposition().decode()
        counted = [line for line in metrics.splitlines() if line.startswith("tts_shared_errors_total")]
        errors = float(counted[0].split()[1])
        assert errors >= 1  # the breaker saw the faults ...
        unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert 1 <= len(unreachable) <= 4  # ... and logged each outage once, not per request
        print(f"\nRedis DEBUG SLEEP 2 + CLIENT PAUSE 1500 under 8 clients: {sum(statuses.values())} requests, "
              f"all 200, 0 dropped; {len(during)} answered while Redis slept (slowest {max(during):.2f} s, "
              f"socket time-out 0.5 s); {errors:.0f} faults counted")  # fmt: skip
    finally:
        admin.close()
        svc.close()


def test_opening_the_breaker_never_closes_a_connection_in_use(server: RedisServer) -> None:
    tier = SharedTier(server.url, namespace=f"b{uuid.uuid4().hex[:6]}:", timeout=0.2, publish_every=0)
    admin = server.client()
    pool = tier.client.connection_pool
    busy = pool.get_connection()  # another thread's connection, half-way through a command
    idle = pool.get_connection()
    try:
        busy.connect()
        idle.connect()
        pool.release(idle)  # back in the pool, unused
        assert tier.put(KEY, _entry())
        admin.execute_command("CLIENT", "PAUSE", 600, "ALL")
        assert tier.get(KEY) is None  # timed out: the breaker opens ...
        assert not tier.up
        assert busy._sock is not None  # ... without closing the socket under its user
        assert all(c._sock is None for c in pool._available_connections)  # idle ones are dropped
    finally:
        pool.release(busy)
        admin.close()
        assert _wait_until(lambda: tier.get(KEY) is not None)
        tier.close()


@pytest.mark.parametrize(
    "exc",
    [ValueError("I/O operation on closed file."), AttributeError("'NoneType' object has no attribute 'sendall'"),
     redis.ConnectionError("Connection reset by peer"), redis.TimeoutError("Timeout reading from socket"),
     OSError(9, "Bad file descriptor")],
)  # fmt: skip
def test_every_error_class_is_contained(exc: Exception) -> None:
    faults: list[int] = []
    breaker = Breaker("redis://test", lambda: faults.append(1))

    def fails() -> bytes:
        raise exc

    assert breaker.call("get", fails, None) is None  # never raised into a request
    assert not breaker.up and faults == [1]
    assert breaker.call("get", lambda: b"x", None) is None  # open: skipped at once until the back-off ends


def test_out_of_memory_redis_is_logged_once_per_cause(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    own = RedisServer(require_redis_server(), directory=tmp_path).start()
    tier = SharedTier(own.url, namespace="oom:", publish_every=0)
    try:
        admin = own.client()
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", admin.info("memory")["used_memory"] + 64 * 1024)
        with caplog.at_level(logging.WARNING, logger="lib.shared"):
            refused = 0
            for i in range(200):  # entries, profiles: every kind of write is refused alike
                key = f"{i:032x}"
                refused += not tier.put(key, _entry(key))
                refused += not tier.put_profile(key, b"p" * 2048)
        assert refused >= 300
        assert tier.up  # a refused command is not an outage
        oom = [r for r in caplog.records if "maxmemory" in r.getMessage()]
        assert len(oom) == 1, [r.getMessage() for r in oom]
        assert tier.status()["errors"] >= 300  # every refusal is still counted
        admin.close()
    finally:
        tier.close()
        own.close()


def test_too_large_entries_are_logged_once_per_minute(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    overrides = {"engine": "tone", "cache.dir": str(tmp_path / "c"), "voices.prewarm": False,
                 "cache.size_limit": 1024 * 1024, "cache.max_entry_fraction": 0.01}  # fmt: skip
    svc = TTSService(load_config(env={}, overrides=overrides), ToneEngine(seconds_per_char=0.5))
    try:
        with caplog.at_level(logging.WARNING, logger="lib.cache"):
            for i in range(30):
                svc.synthesise(_request(f"a long announcement number {i}"))
                svc.cache.flush()
        lines = [r for r in caplog.records if "over cache.max_entry_fraction" in r.getMessage()]
        assert len(lines) == 1 and svc.cache.store.stats()["entries"] == 0
    finally:
        svc.close()


def _request(text: str) -> Any:
    from lib.request.types import TTSRequest

    return TTSRequest(text=text, voice="tone-low")


def test_infinite_or_huge_ttl_never_breaks_a_shared_write(server: RedisServer) -> None:
    tier = SharedTier(server.url, namespace=f"ttl{uuid.uuid4().hex[:6]}:", publish_every=0)
    raw = server.client()
    try:
        assert tier.put(KEY, _entry(), ttl=float("inf"))  # was OverflowError in the writer thread
        assert raw.pttl(tier.namespace + "a:" + KEY) == -1  # kept until Redis evicts it
        assert tier.put(KEY, _entry(), ttl=1e300)
        assert not tier.put(KEY, _entry(), ttl=float("nan"))
        assert tier.put(KEY, _entry(), ttl=60)
        assert 55_000 < raw.pttl(tier.namespace + "a:" + KEY) <= 60_000
    finally:
        raw.close()
        tier.close()
