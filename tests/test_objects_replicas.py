"""Replicas sharing only an object store (a real S3-protocol server process, moto's:
tests/s3_server.py): two services in one process over separate cache directories, as
behind a load balancer, and a fresh replica joining later. Hits across replicas,
single-flight through lease objects, corruption, evictions, TTL, the store killed and
restarted, Redis and the object store together, the dashboard, and the 302 to the store."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import wait_until
from redis_server import RedisServer, require_redis_server
from s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from server_process import NO_ANONYMOUS_LIMITS

from lib.api import create_app
from lib.cache.entry import unpack
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from lib.shared.leases import SharedLeases
from lib.ui.shared_status import objects_markdown
from lib.ui.views import stats_markdown
from tests.api_server import LiveServer

Make = Callable[..., TTSService]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3Server.env().items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def make(tmp_path: Path, s3: S3Server) -> Iterator[Make]:
    """``make(name, url=..., delay=..., **config)``: a replica with its own cache dir; all
    replicas of one test share a prefix of their own in the test bucket."""
    services: list[TTSService] = []
    prefix = f"r{uuid.uuid4().hex[:8]}"

    def build(name: str, url: str | None = None, delay: float = 0.0, **config: Any) -> TTSService:
        overrides = {
            "engine": "tone", "cache.dir": str(tmp_path / name), "voices.prewarm": False,
            "cache.objects_url": url or s3.url(prefix), **config,
        }  # fmt: skip
        config = load_config(env=NO_ANONYMOUS_LIMITS, overrides=overrides)
        service = TTSService(config, engine=ToneEngine(delay=delay), admin_token="t")
        services.append(service)
        return service

    yield build
    for service in services:
        service.close()


def req(text: str, **fields: Any) -> TTSRequest:
    return TTSRequest(text=text, voice="tone-low", **fields)


def calls(*services: TTSService) -> int:
    return sum(s.engine.calls for s in services)  # type: ignore[attr-defined]


def test_a_miss_on_one_replica_is_a_hit_on_the_other(make: Make) -> None:
    a, b = make("a"), make("b")
    assert a.cache.shared is None and b.cache.shared is None  # no Redis: the object store only
    first = a.synthesise(req("Shared through the object store."))
    a.cache.flush()
    second = b.synthesise(req("Shared through the object store."))
    assert (first.cache, second.cache, second.info.get("tier")) == ("MISS", "HIT", "objects")
    assert second.wav == first.wav and calls(a, b) == 1
    assert b.cache.store.contains(second.key)  # copied into the local tiers ...
    third = b.synthesise(req("Shared through the object store."))
    assert third.info.get("tier") == "memory"  # ... and served from them next time
    assert 'tts_cache_tier_hits_total{tier="objects"} 1.0' in b.dashboard.metrics.exposition().decode()


def test_a_fresh_replica_hits_from_the_store(make: Make) -> None:
    a = make("a")
    texts = [f"Preloaded once, phrase {i}." for i in range(3)]
    made = [a.synthesise(req(text)) for text in texts]
    a.close()  # the replica that made them is gone
    fresh = make("fresh")
    for text, result in zip(texts, made, strict=True):
        hit = fresh.synthesise(req(text))
        assert (hit.cache, hit.info.get("tier"), hit.wav) == ("HIT", "objects", result.wav)
    assert calls(fresh) == 0


def test_concurrent_identical_misses_on_two_replicas_run_the_engine_once(make: Make) -> None:
    a, b = make("a", delay=0.5), make("b", delay=0.5)
    barrier = threading.Barrier(12)
    results: list[Any] = [None] * 12

    def ask(i: int) -> None:
        barrier.wait()
        results[i] = (a if i % 2 else b).synthesise(req("Twelve at once, one synthesis."))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls(a, b) == 1  # the lease object held the other replica off
    assert sorted(r.cache for r in results) == ["HIT"] * 11 + ["MISS"]
    assert len({r.wav for r in results}) == 1
    # Released once the write reached every tier (in the writer thread, after the answers).
    a.cache.flush()
    b.cache.flush()
    objects = a.cache.objects
    assert objects is not None
    deadline = time.monotonic() + 30
    while objects.leases(None).holder(results[0].key) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert objects.leases(None).holder(results[0].key) is None  # released


def test_a_paragraphs_sentences_reach_the_store_and_another_replica_reuses_them(make: Make) -> None:
    """A sentence is written to disk before it is used (durable); the object store gets it
    after, like every stored entry, even without Redis."""
    a, b = make("a"), make("b")
    first = a.synthesise(req("The weather is fine today. The trains run on time."))
    a.cache.flush()
    second = b.synthesise(req("The trains run on time. The shop opens at nine."))
    assert (first.info["segments_synthesised"], calls(a)) == (2, 2)
    assert (second.info["segments_reused"], second.info["segments_synthesised"], calls(b)) == (1, 1, 1)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "another key"])
def test_a_corrupt_object_is_not_served_but_deleted_and_remade(make: Make, damage: str) -> None:
    a, b = make("a"), make("b")
    text = f"Bit rot in the object store ({damage})."
    first = a.synthesise(req(text))
    a.cache.flush()
    tier = a.cache.objects
    assert tier is not None
    name = tier.layout.entry(first.key)
    good = tier.client.get(name)
    assert good is not None
    other = a.synthesise(req(text + " Another."))
    a.cache.flush()
    bad = {
        "garbage": b"\x00garbage" * 100,
        "truncated": good.body[: len(good.body) // 2],
        "another key": (tier.client.get(tier.layout.entry(other.key)) or good).body,
    }[damage]
    tier.client.put(name, bad)
    second = b.synthesise(req(text))
    assert second.cache == "MISS"  # made again, never served from the damaged object
    assert second.wav == first.wav
    assert b.cache.objects is not None and b.cache.objects.status()["corrupt"] == 1
    assert "tts_objects_errors_total 1.0" in b.dashboard.metrics.exposition().decode()
    b.cache.flush()
    stored = tier.client.get(name)
    assert stored is not None and unpack(stored.body, first.key).wav == first.wav  # a good copy written back


def test_evicting_a_model_version_or_clearing_reaches_the_store_and_the_other_replica(make: Make) -> None:
    a, b = make("a"), make("b")
    made = a.synthesise(req("Evict me everywhere."))
    a.cache.flush()
    assert b.synthesise(req("Evict me everywhere.")).info.get("tier") == "objects"
    assert b.cache.store.contains(made.key)
    report = a.admin.evict(a.tag, caller=LOCAL)
    assert report["objects_removed"] == 1
    assert a.cache.objects is not None and a.cache.objects.client.get(a.cache.objects.layout.entry(made.key)) is None
    assert b.cache.objects is not None and b.cache.objects.feed is not None and b.cache.objects.feed.poll() == 1
    assert not b.cache.store.contains(made.key)  # the other replica dropped its local copy
    again = b.synthesise(req("Evict me everywhere."))
    assert again.cache == "MISS"
    b.cache.flush()
    assert b.admin.clear(caller=LOCAL)["objects_removed"] == 1
    assert a.cache.objects.feed is not None and a.cache.objects.feed.poll() == 1
    assert a.cache.lookup(again.key) is None and b.cache.lookup(again.key) is None


def test_an_entry_past_its_ttl_is_not_served_from_the_store_and_is_swept(make: Make) -> None:
    a = make("a")
    made = a.synthesise(req("Short-lived.", ttl=1.0))
    a.cache.flush()
    assert a.cache.objects is not None
    head = a.cache.objects.client.head(a.cache.objects.layout.entry(made.key))
    assert head is not None and float(head.metadata["expires"]) == pytest.approx(time.time() + 1, abs=2)
    time.sleep(1.2)
    fresh = make("fresh")
    again = fresh.synthesise(req("Short-lived.", ttl=60.0))
    assert again.cache == "MISS" and calls(fresh) == 1
    fresh.cache.flush()
    later = a.synthesise(req("Short-lived, later."))
    assert later.cache == "MISS"
    assert a.admin.sweep_expired(caller=LOCAL)["objects_expired_removed"] == 0  # its hour has not passed yet
    assert a.cache.objects.sweep(time.time() + 7200) == 1  # the 60 s entry, hours later; the stale index goes too


def test_the_store_killed_and_restarted_never_fails_a_request_and_heals(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    with S3Server() as own:
        a, b = make("a", url=own.url("kill")), make("b", url=own.url("kill"))
        assert a.synthesise(req("Before the outage.")).cache == "MISS"
        a.cache.flush()
        caplog.set_level(logging.WARNING)
        own.stop(kill=True)
        during = [a.synthesise(req(f"During the outage {i}.")) for i in range(5)]
        assert all(r.cache == "MISS" for r in during)  # served by the engine
        assert a.synthesise(req("Before the outage.")).info.get("tier") == "memory"
        assert b.synthesise(req("During the outage 0.")).cache == "MISS"  # not shared meanwhile, not failed
        health = a.dashboard.health()
        assert health["status"] == "degraded" and health["objects"] == {"up": False}
        assert any("object store" in reason for reason in health["reasons"])
        assert "tts_objects_tier_up 0.0" in a.dashboard.metrics.exposition().decode()
        assert "**down" in objects_markdown(a.dashboard.snapshot(caller=LOCAL)["objects"])  # the Cache tab says so
        assert len([r for r in caplog.records if "is unreachable" in r.getMessage()]) <= 2  # once per replica
        own.start()
        assert wait_until(
            lambda: a.dashboard.health()["status"] == "ok" and b.cache.objects is not None and b.cache.objects.up
        )
        after = a.synthesise(req("After the outage."))
        a.cache.flush()
        assert b.synthesise(req("After the outage.")).info.get("tier") == "objects"
        assert after.cache == "MISS"


def test_with_redis_too_redis_is_asked_before_the_store_and_keeps_the_leases(make: Make) -> None:
    with RedisServer(require_redis_server()) as redis_server:
        a = make("a", **{"cache.shared_url": redis_server.url})
        b = make("b", **{"cache.shared_url": redis_server.url})
        assert isinstance(a.singleflight.leases, SharedLeases)  # Redis's leases, not lease objects
        made = a.synthesise(req("Both shared tiers."))
        a.cache.flush()
        # every result in the store ...
        assert a.cache.objects is not None and a.cache.objects.get(made.key) is not None
        assert b.synthesise(req("Both shared tiers.")).info.get("tier") == "shared"  # ... Redis asked first
        assert list(a.cache.objects.client.list(a.cache.objects.location.name("l/"))) == []
        redis_server.client().flushdb()  # Redis lost its audio (say, a restart without persistence)
        fresh = make("fresh", **{"cache.shared_url": redis_server.url})
        assert fresh.synthesise(req("Both shared tiers.")).info.get("tier") == "objects"
        report = a.admin.evict(a.tag, caller=LOCAL)
        assert report["objects_removed"] == 1 and "shared_removed" in report
        assert a.cache.objects.feed is None  # Redis carries the evictions to the other replicas


def test_the_dashboard_shows_the_tier_and_no_credential(make: Make, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    a = make("a")
    a.synthesise(req("Dashboard."))
    a.cache.flush()
    snap = a.dashboard.snapshot(caller=LOCAL)
    assert snap["objects"]["up"] is True and snap["objects"]["puts"] == 1
    text = stats_markdown(snap)
    assert "Object store" in text and snap["objects"]["url"] in text
    shown = repr(snap) + repr(a.dashboard.health()) + a.dashboard.metrics.exposition().decode() + text + caplog.text
    assert SECRET_KEY not in shown and ACCESS_KEY not in shown


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_audio_may_redirect_to_a_presigned_url_in_the_store(make: Make, fmt: str) -> None:
    service = make("a", **{"cache.objects_redirect": True})
    with LiveServer(create_app(service)) as live, httpx.Client(base_url=live.url, timeout=30) as http:
        made = http.post("/api/tts", data={"text": "Fetch me from the store.", "voice": "tone-low"})
        key = made.headers["X-Cache-Key"]
        answer = http.get(f"/api/audio/{key}.{fmt}")
        assert answer.status_code == 302
        location = answer.headers["location"]
        assert service.cache.objects is not None and location.startswith(f"{service.cache.objects.url}/p/{key}.{fmt}?")
        assert "X-Amz-Signature=" in location and SECRET_KEY not in location
        fetched = httpx.get(location, timeout=30)
        entry = service.cache.find(key)
        assert entry is not None
        assert fetched.status_code == 200 and fetched.content == service.cache.audio_bytes(entry, fmt)
        assert http.get(f"/api/audio/{key}.mp3").status_code == 200  # other formats: served here
        assert http.head(f"/api/audio/{key}.{fmt}").status_code == 200  # a presigned GET cannot answer a HEAD


def test_without_the_setting_audio_is_served_by_the_app(make: Make) -> None:
    service = make("a")
    with LiveServer(create_app(service)) as live, httpx.Client(base_url=live.url, timeout=30) as http:
        key = http.post("/api/tts", data={"text": "Served here.", "voice": "tone-low"}).headers["X-Cache-Key"]
        answer = http.get(f"/api/audio/{key}.wav")
        assert answer.status_code == 200 and answer.content[:4] == b"RIFF"
