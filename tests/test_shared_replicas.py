"""Two app replicas (separate processes, separate local cache directories) sharing one
real ``redis-server``, as behind a load balancer.

Each replica is ``tests/shared_replica.py``: a ``TTSService`` with a slow ``tone``
engine (so that concurrent requests overlap) served over loopback HTTP. Engine calls
are counted inside each replica and added up here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from redis_server import RedisServer, require_redis_server

from lib.cache.entry import unpack

HERE = Path(__file__).resolve().parent
VOICES = Path(os.environ.get("TTS_TESTDATA_DIR") or HERE.parents[1] / "shared" / "testdata" / "voices")
ENGINE_DELAY = 0.5  # seconds per engine call: long enough for 16 requests to overlap


class Replica:
    """One replica process and a small client for it."""

    def __init__(self, name: str, cache_dir: Path, url: str, log: Path, extra: tuple[str, ...] = ()) -> None:
        """``extra``: more arguments of ``tests/shared_replica.py`` (e.g. ``--batch-lease 2``)."""
        self.name = name
        self.log = log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "shared_replica.py"), "--cache-dir", str(cache_dir),
             "--shared-url", url, "--delay", str(ENGINE_DELAY), *extra],
            stdout=subprocess.PIPE, stderr=self._log_file, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.close()
            raise RuntimeError(f"replica {name} did not start: {line!r}\n{log.read_text(errors='replace')}")
        self.base = f"http://127.0.0.1:{int(line.split()[1])}"

    def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                loaded: dict[str, Any] = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"replica {self.name} answered {exc.code}: {exc.read().decode()}") from exc
        return loaded

    def status_of(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, body)`` of a call that may fail."""
        request = urllib.request.Request(
            self.base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def lookup(self, key: str) -> dict[str, bool]:
        """Which of this replica's tiers (and Redis) hold ``key``, without copying it."""
        found: dict[str, bool] = self.call("/lookup", {"key": key})
        return found

    def synth(self, text: str, **fields: Any) -> dict[str, Any]:
        return self.call("/synth", {"text": text, "voice": fields.pop("voice", "tone-low"), **fields})

    def status(self) -> dict[str, Any]:
        return self.call("/status")

    def metric(self, name: str) -> float:
        match = re.search(rf"^{name} (\S+)$", self.status()["metrics"], re.MULTILINE)
        assert match is not None, name
        return float(match.group(1))

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.call("/quit", {})
                self.process.wait(timeout=10)
            except Exception:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log_file.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Replica, Replica]]:
    server = RedisServer(require_redis_server()).start()
    base = tmp_path_factory.mktemp("replicas")
    replicas: list[Replica] = []
    try:
        for name in ("a", "b"):
            replicas.append(Replica(name, base / f"cache-{name}", server.url, base / f"{name}.log"))
        yield server, replicas[0], replicas[1]
    finally:
        for replica in replicas:
            replica.close()
        server.close()


def _engine_calls(*replicas: Replica) -> int:
    return sum(int(r.status()["engine_calls"]) for r in replicas)


def test_a_miss_on_one_replica_is_a_hit_on_the_other(cluster: tuple[RedisServer, Replica, Replica]) -> None:
    _, a, b = cluster
    before = _engine_calls(a, b)
    first = a.synth("Shared between replicas, one.")
    second = b.synth("Shared between replicas, one.")
    assert first["cache"] == "MISS"
    assert second["cache"] == "HIT"
    assert second["key"] == first["key"]
    assert second["wav_sha256"] == first["wav_sha256"]  # identical audio
    assert _engine_calls(a, b) == before + 1
    third = b.synth("Shared between replicas, one.")
    assert (third["cache"], third["tier"]) == ("HIT", "memory")  # copied into B's local tiers


def test_concurrent_identical_requests_on_both_replicas_run_the_engine_once(
    cluster: tuple[RedisServer, Replica, Replica],
) -> None:
    _, a, b = cluster
    before = _engine_calls(a, b)
    text = "Sixteen requests at once, one synthesis."
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda i: (a if i % 2 else b).synth(text), range(16)))
    assert _engine_calls(a, b) == before + 1
    assert sorted(r["cache"] for r in results) == ["HIT"] * 15 + ["MISS"]
    assert len({r["wav_sha256"] for r in results}) == 1
    assert len({r["key"] for r in results}) == 1


def test_a_voice_saved_on_one_replica_is_usable_on_the_other(cluster: tuple[RedisServer, Replica, Replica]) -> None:
    _, a, b = cluster
    prompt = VOICES / "zh_female_prompt.wav"
    if not prompt.is_file():
        pytest.skip(f"test voice {prompt} is missing; set TTS_TESTDATA_DIR")
    saved = a.call(
        "/voice", {"name": "front desk", "prompt_path": str(prompt), "prompt_text": "希望你以后能够做的比我还好呦。"}
    )
    assert saved["name"] == "front desk"
    assert "front desk" in b.status()["voices"]
    extracted_before = b.status()["extract_calls"]
    on_b = b.synth("A saved voice, used on the other replica.", voice="front desk")
    assert on_b["cache"] == "MISS"
    assert b.status()["extract_calls"] == extracted_before  # the voice profile came from Redis too
    on_a = a.synth("A saved voice, used on the other replica.", voice="front desk")
    assert on_a["cache"] == "HIT"
    assert (on_a["key"], on_a["wav_sha256"]) == (on_b["key"], on_b["wav_sha256"])


def test_a_value_corrupted_in_redis_is_not_served(cluster: tuple[RedisServer, Replica, Replica]) -> None:
    server, a, b = cluster
    text = "Bit rot in the shared tier."
    first = a.synth(text)
    name = f"tts:a:{first['key']}"
    raw = server.client()
    try:
        assert wait_until(lambda: raw.exists(name) == 1, limit=30.0, every=0.1)  # A writes to Redis in the background
        value = bytearray(raw.get(name) or b"")
        value[-100] ^= 0xFF  # one byte of the FLAC audio
        raw.set(name, bytes(value))
        errors_before = b.metric("tts_shared_errors_total")
        second = b.synth(text)
        assert second["cache"] == "MISS"  # regenerated, not served from the damaged copy
        assert second["wav_sha256"] == first["wav_sha256"]
        assert b.metric("tts_shared_errors_total") == errors_before + 1
        assert wait_until(lambda: raw.exists(name) == 1, limit=30.0, every=0.1)  # B wrote a good copy back
        assert unpack(raw.get(name) or b"", first["key"]).meta["text"] == text
    finally:
        raw.close()


def test_stats_aggregate_over_replicas(cluster: tuple[RedisServer, Replica, Replica]) -> None:
    _, a, b = cluster
    a.synth("Counted on A.")
    b.synth("Counted on B.")
    b_calls = b.status()["engine_calls"]  # /status publishes the replica's counters first
    status = a.status()
    shared = status["shared"]
    assert len({row["replica"] for row in shared["replicas"]}) == 2
    assert shared["cluster"]["engine_calls"] == status["engine_calls"] + b_calls
    assert shared["cluster"]["misses"] >= 2
    assert shared["up"] is True


def test_killing_redis_leaves_both_replicas_serving_and_they_reconnect(
    cluster: tuple[RedisServer, Replica, Replica],
) -> None:
    server, a, b = cluster
    known = a.synth("Known before the outage.")
    outcomes: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:  # steady traffic on both replicas through the outage
        i = 0
        while not stop.is_set():
            replica = (a, b)[i % 2]
            try:
                outcomes.append(replica.synth(f"Traffic during the outage {i % 6}.")["cache"])
            except Exception as exc:
                failures.append(f"{replica.name}: {exc}")
            i += 1

    thread = threading.Thread(target=load)
    thread.start()
    try:
        time.sleep(0.5)
        server.stop(kill=True)
        served_during = len(outcomes)
        assert b.synth("Known before the outage.")["wav_sha256"] == known["wav_sha256"]
        during = a.synth("New while Redis is down.")
        assert during["cache"] == "MISS"
        assert a.synth("New while Redis is down.")["cache"] == "HIT"  # local tiers still work
        for replica in (a, b):
            assert replica.metric("tts_shared_tier_up") == 0.0
            assert replica.metric("tts_shared_errors_total") >= 1
            assert replica.status()["shared"]["up"] is False
        assert wait_until(lambda: len(outcomes) > served_during + 4, limit=30.0, every=0.1)  # still serving
        server.start()  # same port, empty
        assert wait_until(lambda: a.status()["shared"]["up"] and b.status()["shared"]["up"], limit=30.0, every=0.1)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert failures == []
    after = a.synth("New after Redis came back.")
    assert after["cache"] == "MISS"
    on_b = b.synth("New after Redis came back.")
    assert on_b["cache"] == "HIT"
    assert on_b["wav_sha256"] == after["wav_sha256"]
    assert a.metric("tts_shared_tier_up") == 1.0
    for replica in (a, b):  # logged once per state change, not once per request
        log = replica.log.read_text(errors="replace")
        assert log.count("is unreachable") == 1, log
        assert log.count("reachable again") == 1, log


# -- evictions and deletions reach every replica (issue 10) ----------------------------------


def test_evicting_a_tag_on_one_replica_removes_it_from_redis_and_the_other_replica(
    cluster: tuple[RedisServer, Replica, Replica],
) -> None:
    server, a, b = cluster
    text = "Evicted from every tier of every replica."
    made = a.synth(text, voice="tone-high")
    kept = a.synth("Kept: another voice.", voice="tone-low")
    raw = server.client()
    try:
        assert wait_until(lambda: raw.exists(f"tts:a:{made['key']}") == 1, limit=30.0, every=0.1)
        assert wait_until(lambda: raw.exists(f"tts:a:{kept['key']}") == 1, limit=30.0, every=0.1)
        assert b.synth(text, voice="tone-high")["cache"] == "HIT"  # now in B's memory and on B's disk too
        assert b.lookup(made["key"]) == {"memory": True, "disk": True, "shared": True}
        report = a.call("/evict", {"tag": "voice:preset:tone-high"})
        assert report["removed"] >= 1 and report["shared_removed"] >= 1
        assert raw.exists(f"tts:a:{made['key']}") == 0  # Redis's copy: gone at once
        assert a.lookup(made["key"]) == {"memory": False, "disk": False, "shared": False}
        # B drops its own copies once it reads the eviction feed (about a second).
        assert wait_until(
            lambda: b.lookup(made["key"]) == {"memory": False, "disk": False, "shared": False}, limit=30.0, every=0.1
        )
        assert raw.exists(f"tts:a:{kept['key']}") == 1  # another voice's entry stays
        assert b.lookup(kept["key"])["shared"] is True
        before = _engine_calls(a, b)
        again = b.synth(text, voice="tone-high")
        assert again["cache"] == "MISS" and _engine_calls(a, b) == before + 1  # nothing came back
    finally:
        raw.close()


def test_a_voice_saved_on_a_and_deleted_on_b_is_gone_on_a(cluster: tuple[RedisServer, Replica, Replica]) -> None:
    _, a, b = cluster
    prompt = VOICES / "male_prompt.wav"
    if not prompt.is_file():
        pytest.skip(f"test voice {prompt} is missing; set TTS_TESTDATA_DIR")
    a.call("/voice", {"name": "counter 3", "prompt_path": str(prompt)})
    assert a.synth("Counter three is open.", voice="counter 3")["cache"] == "MISS"
    assert "counter 3" in a.status()["local_voices"]  # A holds its own copy on disk
    assert b.call("/delete_voice", {"name": "counter 3"}) == {"deleted": "counter 3"}
    # Within A's freshness window (10 s) the voice is gone on A too, its local copy included.
    assert wait_until(lambda: "counter 3" not in a.status()["voices"], limit=40, every=0.1)
    status, body = a.status_of("/synth", {"text": "Counter three is open.", "voice": "counter 3"})
    assert status == 404 and "no saved or preset voice named 'counter 3'" in body["error"]
    assert "counter 3" not in a.status()["local_voices"]
