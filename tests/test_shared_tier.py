"""The shared tier against a real ``redis-server``: entries, voices, leases, faults,
statistics, and two services in one process sharing it.

Each test works under its own key namespace (or its own services), so tests share one
server without seeing each other's keys.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
from conftest import wait_until
from hypothesis import given, settings
from hypothesis import strategies as st
from redis_server import RedisServer, free_port, require_redis_server

from lib.cache.entry import CachedAudio, pack, unpack
from lib.cache.leases import DiskLeases
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import ConfigError, NotFoundError, StoreUnavailableError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from lib.shared import CorruptValueError, RedisLeases, SharedTier
from lib.shared.codec import decode_voice, encode_voice
from lib.ui.shared_status import status_markdown

KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(require_redis_server()) as running:
        yield running


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def make_tier(server: RedisServer) -> Iterator[Callable[..., SharedTier]]:
    tiers: list[SharedTier] = []

    def make(url: str | None = None, **kwargs: object) -> SharedTier:
        kwargs.setdefault("namespace", f"t{uuid.uuid4().hex[:8]}:")
        kwargs.setdefault("publish_every", 0)
        tier = SharedTier(url or server.url, **kwargs)  # type: ignore[arg-type]
        tiers.append(tier)
        return tier

    yield make
    for tier in tiers:
        tier.close()


def _entry(key: str = KEY, seconds: float = 0.3) -> bytes:
    import numpy as np

    pcm = (np.sin(np.arange(int(22050 * seconds)) / 7.0) * 8000).astype(np.int16)
    return pack(CachedAudio.from_pcm(key, pcm, 22050, {"engine": "tone"}))


def _dead_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


# -- entries --------------------------------------------------------------------------------


def test_entry_round_trip_keeps_bytes_and_ttl(make_tier: Callable[..., SharedTier], raw: redis.Redis) -> None:
    tier = make_tier()
    blob = _entry()
    assert tier.get(KEY) is None
    assert tier.put(KEY, blob, ttl=60)
    assert tier.get(KEY) == blob
    assert unpack(tier.get(KEY) or b"", KEY).meta["engine"] == "tone"
    assert 0 < raw.pttl(tier.namespace + "a:" + KEY) <= 60_000
    other = "f" * 32
    assert tier.put(other, _entry(other), ttl=None)
    assert raw.pttl(tier.namespace + "a:" + other) == -1  # no TTL: left to maxmemory eviction
    status = tier.status()
    assert (status["hits"], status["misses"], status["puts"]) == (2, 1, 2)


def test_clear_deletes_only_our_audio_entries(make_tier: Callable[..., SharedTier], raw: redis.Redis) -> None:
    ours, theirs = make_tier(), make_tier()
    keys = [f"{i:032x}" for i in range(3)]
    for key in keys:
        ours.put(key, _entry(key))
    theirs.put(KEY, _entry())
    ours.put_voice("anna", {"flac": b"fLaC-ish", "prompt_text": "", "created": 1.0, "fingerprint": "ab"})
    raw.set("someone-else:key", b"keep me")
    assert ours.clear() == 3
    assert all(ours.get(k) is None for k in keys)
    assert theirs.get(KEY) is not None
    assert ours.get_voice("anna") is not None
    assert raw.get("someone-else:key") == b"keep me"


def test_corrupt_entry_is_deleted_and_counted(make_tier: Callable[..., SharedTier], raw: redis.Redis) -> None:
    faults: list[int] = []
    tier = make_tier(on_error=lambda: faults.append(1))
    tier.put(KEY, _entry())
    tier.corrupt(KEY, ValueError("checksum mismatch"))
    assert raw.exists(tier.namespace + "a:" + KEY) == 0
    assert faults == [1]
    assert tier.status()["corrupt"] == 1


# -- voices ---------------------------------------------------------------------------------


def test_voice_records_round_trip_and_damage_is_refused(make_tier: Callable[..., SharedTier], raw: redis.Redis) -> None:
    tier = make_tier()
    record = {"flac": b"\x00\x01flac", "prompt_text": "希望你以后", "created": 12.5, "fingerprint": "abc"}
    assert tier.put_voice("front desk", record)
    assert tier.voice_names() == ["front desk"]
    assert tier.get_voice("front desk") == record
    name = tier.namespace + "v:front desk"
    value = bytearray(raw.get(name) or b"")
    value[-1] ^= 0x40
    raw.set(name, bytes(value))
    assert tier.get_voice("front desk") is None
    assert raw.exists(name) == 0  # deleted
    assert tier.status()["corrupt"] == 1
    tier.put_voice("front desk", record)
    assert tier.delete_voice("front desk") is True
    assert tier.delete_voice("front desk") is False
    assert tier.voice_names() == []


def test_a_voice_copied_under_another_name_is_refused() -> None:
    value = encode_voice("anna", {"flac": b"x", "prompt_text": ""})
    with pytest.raises(CorruptValueError):
        decode_voice("bob", value)


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=40), flac=st.binary(min_size=1, max_size=300), where=st.integers(min_value=0))
def test_voice_codec_round_trips_and_detects_any_changed_byte(text: str, flac: bytes, where: int) -> None:
    record = {"flac": flac, "prompt_text": text, "created": 1.5, "fingerprint": "f"}
    value = encode_voice("v", record)
    assert decode_voice("v", value) == record
    damaged = bytearray(value)
    damaged[where % len(damaged)] ^= 0xFF
    with pytest.raises(CorruptValueError):
        decode_voice("v", bytes(damaged))


def test_profiles_round_trip_and_damage_is_refused(make_tier: Callable[..., SharedTier], raw: redis.Redis) -> None:
    tier = make_tier()
    assert tier.put_profile("p1", b"TTVPprofile-bytes")
    assert tier.get_profile("p1") == b"TTVPprofile-bytes"
    raw.set(tier.namespace + "p:p1", b"garbage")
    assert tier.get_profile("p1") is None
    assert raw.exists(tier.namespace + "p:p1") == 0


# -- leases ---------------------------------------------------------------------------------


def test_redis_leases_only_the_owner_renews_or_releases(raw: redis.Redis) -> None:
    leases = RedisLeases(raw, f"l{uuid.uuid4().hex[:8]}:")
    token = leases.acquire(KEY, 30)
    assert token is not None
    assert leases.acquire(KEY, 30) is None
    assert leases.held(KEY)
    assert leases.renew(KEY, "not-the-token", 30) is False
    assert leases.release(KEY, "not-the-token") is False
    assert leases.owner(KEY) == token  # a stranger's release left it alone
    assert leases.renew(KEY, token, 30) is True
    assert leases.release(KEY, token) is True
    assert not leases.held(KEY)
    assert leases.acquire(KEY, 30) is not None


def test_redis_lease_of_a_dead_holder_expires(raw: redis.Redis) -> None:
    leases = RedisLeases(raw, f"l{uuid.uuid4().hex[:8]}:")
    dead = leases.acquire(KEY, 0.2)  # the holder "dies": never renews, never releases
    assert dead is not None
    assert wait_until(lambda: not leases.held(KEY))
    taker = leases.acquire(KEY, 30)
    assert taker is not None and taker != dead
    assert leases.release(KEY, dead) is False  # the late holder cannot delete the new lock
    assert leases.owner(KEY) == taker


def test_lease_scripts_survive_a_flushed_script_cache(raw: redis.Redis) -> None:
    leases = RedisLeases(raw, f"l{uuid.uuid4().hex[:8]}:")
    token = leases.acquire(KEY, 30)
    assert token is not None
    raw.script_flush()
    assert leases.renew(KEY, token, 30) is True
    assert leases.release(KEY, token) is True


def test_shared_leases_fall_back_to_local_locks_while_redis_is_down(
    make_tier: Callable[..., SharedTier], tmp_path: Path
) -> None:
    up = make_tier().leases(local=DiskLeases(str(tmp_path / "locks-up")))
    token = up.acquire(KEY, 30)
    assert token is not None and token.startswith("r:")
    assert up.held(KEY) and up.acquire(KEY, 30) is None
    up.release(KEY, token)
    assert not up.held(KEY)

    down = make_tier(_dead_url()).leases(local=DiskLeases(str(tmp_path / "locks-down")))
    token = down.acquire(KEY, 30)
    assert token is not None and token.startswith("l:")
    assert down.held(KEY)
    assert down.acquire(KEY, 30) is None  # the local lock still guards this host
    assert down.renew(KEY, token, 30) is True
    down.release(KEY, token)
    assert not down.held(KEY)


# -- faults ---------------------------------------------------------------------------------


def test_redis_down_answers_not_found_counts_and_logs_once(
    make_tier: Callable[..., SharedTier], caplog: pytest.LogCaptureFixture
) -> None:
    faults: list[int] = []
    with caplog.at_level(logging.WARNING, logger="lib.shared"):
        tier = make_tier(_dead_url(), on_error=lambda: faults.append(1))
        for _ in range(20):
            assert tier.get(KEY) is None
            assert tier.put(KEY, _entry()) is False
        assert tier.voice_names() == []
        assert tier.get_voice("anna") is None
    assert not tier.up
    assert faults and tier.status()["errors"] == len(faults)
    assert tier.status()["up"] is False
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1


def test_a_malformed_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"cache\.shared_url"):
        SharedTier("redis://127.0.0.1:notaport/0", publish_every=0)


def test_redis_restarted_is_used_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    own = RedisServer(require_redis_server(), directory=tmp_path)
    own.start()
    tier = SharedTier(own.url, namespace="r:", publish_every=0.1)
    try:
        assert tier.put(KEY, _entry())
        with caplog.at_level(logging.WARNING, logger="lib.shared"):
            own.stop(kill=True)
            assert tier.get(KEY) is None
            assert not tier.up
            own.start()  # same port, empty (no persistence)
            assert wait_until(lambda: tier.up)  # the stats publisher probes with backoff
        blob = _entry()
        assert tier.put(KEY, blob)
        assert tier.get(KEY) == blob
        messages = [r.getMessage() for r in caplog.records]
        assert sum("unreachable" in m for m in messages) == 1
        assert sum("reachable again" in m for m in messages) == 1
    finally:
        tier.close()
        own.close()


def test_slow_redis_times_out_and_is_skipped(make_tier: Callable[..., SharedTier], server: RedisServer) -> None:
    faults: list[int] = []
    tier = make_tier(on_error=lambda: faults.append(1), timeout=0.2)
    assert tier.put(KEY, _entry())
    admin = server.client()
    try:
        admin.execute_command("CLIENT", "PAUSE", 800, "ALL")  # every command now stalls for 0.8 s
        assert tier.get(KEY) is None  # gave up after its socket time-out
        assert not tier.up
        assert faults
    finally:
        admin.close()
    assert wait_until(lambda: tier.get(KEY) is not None)


# -- statistics -----------------------------------------------------------------------------


def test_status_aggregates_every_replica(make_tier: Callable[..., SharedTier]) -> None:
    namespace = f"s{uuid.uuid4().hex[:8]}:"
    a = make_tier(namespace=namespace, replica="a", counters=lambda: {"hits": 3, "misses": 1, "engine_calls": 1})
    b = make_tier(namespace=namespace, replica="b", counters=lambda: {"hits": 5, "misses": 2, "engine_calls": 2})
    a.status()
    status = b.status()
    assert status["up"] is True and status["replica"] == "b"
    assert sorted(r["replica"] for r in status["replicas"]) == ["a", "b"]
    cluster = status["cluster"]
    assert (cluster["hits"], cluster["misses"], cluster["engine_calls"]) == (8, 3, 3)
    assert cluster["hit_rate"] == round(8 / 11, 4)
    assert "redis_maxmemory_policy" in status


# -- two services in one process --------------------------------------------------------------


def _service(tmp: Path, url: str) -> TTSService:
    config = load_config(
        env={}, overrides={"engine": "tone", "cache.dir": str(tmp), "cache.shared_url": url, "voices.prewarm": False}
    )
    return TTSService(config, engine=ToneEngine())


def _metric(svc: TTSService, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", svc.dashboard.metrics.exposition().decode(), re.MULTILINE)
    assert match is not None, name
    return float(match.group(1))


def test_two_services_share_results_and_clear(tmp_path: Path, server: RedisServer) -> None:
    a, b = _service(tmp_path / "a", server.url), _service(tmp_path / "b", server.url)
    try:
        request = TTSRequest(text="shared between two services", voice="tone-low", ttl=3600)
        first = a.synthesise(request)
        a.cache.flush()  # entries reach the disk and shared tiers in the background
        second = b.synthesise(request)
        assert (first.cache, second.cache, second.info["tier"]) == ("MISS", "HIT", "shared")
        assert second.wav == first.wav
        assert b.engine.calls == 0  # type: ignore[attr-defined]
        assert b.cache.store.get(first.key) is not None  # copied into B's disk tier
        assert b.synthesise(request).info["tier"] == "memory"
        assert _metric(b, "tts_shared_tier_up") == 1.0
        assert b.dashboard.snapshot(caller=LOCAL)["shared"]["up"] is True
        board = status_markdown(b.dashboard.snapshot(caller=LOCAL)["shared"])
        assert "up 正常" in board and "All replicas" in board
        b.cache.flush()
        assert a.admin.clear(caller=LOCAL)["shared_removed"] >= 1
        assert a.cache.shared.get(first.key) is None
    finally:
        a.close()
        b.close()


def test_a_voice_deleted_on_one_service_disappears_on_the_other(
    tmp_path: Path, server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lib.voices.library import VoiceLibrary

    monkeypatch.setattr(VoiceLibrary, "SHARED_FRESH_SECONDS", 0.2)
    a, b = _service(tmp_path / "a", server.url), _service(tmp_path / "b", server.url)
    try:
        t = np.arange(2 * 16_000) / 16_000
        prompt = (16_000, (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype("float32"))
        a.voices.save("lobby", prompt, "", caller=LOCAL)
        assert b.synthesise(TTSRequest(text="welcome", voice="lobby")).cache == "MISS"
        assert "lobby" in [v["name"] for v in b.voices.list(caller=LOCAL)]
        a.voices.delete("lobby", caller=LOCAL)
        time.sleep(0.3)
        assert "lobby" not in [v["name"] for v in b.voices.list(caller=LOCAL)]
        with pytest.raises(NotFoundError):
            b.synthesise(TTSRequest(text="welcome", voice="lobby"))
    finally:
        a.close()
        b.close()


def test_service_with_redis_down_serves_from_local_tiers(tmp_path: Path) -> None:
    svc = _service(tmp_path, _dead_url())
    try:
        request = TTSRequest(text="no redis here", voice="tone-high")
        assert svc.synthesise(request).cache == "MISS"
        assert svc.synthesise(request).cache == "HIT"
        assert svc.engine.calls == 1  # type: ignore[attr-defined]
        assert _metric(svc, "tts_shared_errors_total") >= 1
        assert _metric(svc, "tts_shared_tier_up") == 0.0
        assert svc.dashboard.health()["shared"]["up"] is False
        assert "down" in status_markdown(svc.dashboard.snapshot(caller=LOCAL)["shared"])
        assert status_markdown(None) == ""
    finally:
        svc.close()


def test_flushed_redis_is_regenerated_not_an_error(tmp_path: Path, server: RedisServer, raw: redis.Redis) -> None:
    a, b = _service(tmp_path / "a", server.url), _service(tmp_path / "b", server.url)
    try:
        request = TTSRequest(text="flushed away", voice="tone-low")
        a.synthesise(request)
        a.cache.flush()
        raw.flushdb()
        result = b.synthesise(request)
        b.cache.flush()
        assert result.cache == "MISS"
        assert _metric(b, "tts_shared_errors_total") == 0.0
        assert b.cache.shared.get(result.key) is not None  # written back
    finally:
        a.close()
        b.close()


# -- evictions and voices across replicas (issue 10) ------------------------------------------


def _tagged(key: str, tag: str, voice: str, text: str = "") -> bytes:
    pcm = (np.sin(np.arange(2205) / 7.0) * 8000).astype(np.int16)
    meta = {"engine": "tone", "tag": tag, "voice": voice, "text": text}
    return pack(CachedAudio.from_pcm(key, pcm, 22050, meta))


def test_evict_removes_only_the_tags_entries_from_redis(make_tier: Callable[..., SharedTier]) -> None:
    tier = make_tier()
    long_text = "x" * 9000  # a header longer than the first bytes read of each value
    entries = {
        f"{1:032x}": ("tone:v1", "preset:tone-low", ""),
        f"{2:032x}": ("tone:v1", "abc", long_text),
        f"{3:032x}": ("tone:v2", "abc", ""),
        f"{4:032x}": ("tone:v2", "preset:tone-low", long_text),
    }
    for key, (tag, voice, text) in entries.items():
        assert tier.put(key, _tagged(key, tag, voice, text))
    assert tier.evict("tone:v1") == 2
    assert [tier.get(k) is not None for k in entries] == [False, False, True, True]
    assert tier.evict("voice:preset:tone-low") == 1
    assert [tier.get(k) is not None for k in entries] == [False, False, True, False]
    assert tier.evict("tone:none") == 0


def test_evict_and_clear_reach_the_other_services_local_tiers(tmp_path: Path, server: RedisServer) -> None:
    a, b = _service(tmp_path / "a", server.url), _service(tmp_path / "b", server.url)
    try:
        high = TTSRequest(text="evicted here and there", voice="tone-high")
        low = TTSRequest(text="kept", voice="tone-low")
        made_high, made_low = a.synthesise(high), a.synthesise(low)
        a.cache.flush()
        assert b.synthesise(high).info["tier"] == "shared" and b.synthesise(low).info["tier"] == "shared"
        assert b.cache.store.contains(made_high.key) and b.cache.memory_entry(made_high.key) is not None
        report = a.admin.evict("voice:preset:tone-high", caller=LOCAL)
        assert (report["removed"], report["shared_removed"]) == (1, 1)
        assert a.cache.shared is not None and a.cache.shared.get(made_high.key) is None
        # B reads the eviction feed (about every second) and drops its disk and memory copies.
        assert wait_until(
            lambda: not b.cache.store.contains(made_high.key) and b.cache.memory_entry(made_high.key) is None
        )
        assert b.cache.store.contains(made_low.key)  # another voice: kept
        assert b.synthesise(high).cache == "MISS"
        b.cache.flush()
        a.admin.clear(caller=LOCAL)
        assert wait_until(lambda: b.cache.store.stats()["entries"] == 0 and len(b.cache.memory) == 0)
    finally:
        a.close()
        b.close()


def test_a_replica_that_was_stopped_applies_the_evictions_it_missed(tmp_path: Path, server: RedisServer) -> None:
    a, b = _service(tmp_path / "a", server.url), _service(tmp_path / "b", server.url)
    request = TTSRequest(text="evicted while B was stopped", voice="tone-high")
    try:
        made = a.synthesise(request)
        a.cache.flush()
        b.synthesise(request)
        assert b.cache.store.contains(made.key)
        assert b.cache.shared is not None
        b.cache.shared.evictions.poll()
        assert (tmp_path / "b" / "shared-evictions.json").is_file()  # where B got to
    finally:
        b.close()
    try:
        a.admin.evict("voice:preset:tone-high", caller=LOCAL)
        b = _service(tmp_path / "b", server.url)  # same cache directory, restarted
        assert wait_until(lambda: not b.cache.store.contains(made.key))
    finally:
        a.close()
        b.close()


def test_evictions_trimmed_before_a_replica_read_them_clear_its_local_tiers(
    tmp_path: Path, server: RedisServer, raw: redis.Redis
) -> None:
    b = _service(tmp_path / "b", server.url)
    request = TTSRequest(text="kept locally, then cleared", voice="tone-low")
    try:
        made = b.synthesise(request)
        b.cache.flush()
        assert b.cache.shared is not None
        b.cache.shared.evictions.poll()
    finally:
        b.close()
    for i in range(3):  # evictions B never reads: trimmed away
        raw.xadd("tts:evictions", {"tag": f"tone:gone-{i}", "all": "0", "by": "elsewhere"})
    raw.xtrim("tts:evictions", maxlen=0)
    b = _service(tmp_path / "b", server.url)
    try:
        assert wait_until(lambda: not b.cache.store.contains(made.key))
    finally:
        b.close()


def test_voices_follow_redis_newest_wins(tmp_path: Path, server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from lib.voices.library import VoiceLibrary

    monkeypatch.setattr(VoiceLibrary, "SHARED_FRESH_SECONDS", 0.0)
    a, b = _service(tmp_path / "a", server.url), _service(tmp_path / "b", server.url)

    def prompt(hz: float) -> tuple[int, np.ndarray]:
        t = np.arange(2 * 16_000) / 16_000
        return 16_000, (0.3 * np.sin(2 * np.pi * hz * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype("float32")

    def local(svc: TTSService, name: str) -> dict | None:  # type: ignore[type-arg]
        with svc.voices.library.store.using("test") as cache:
            return cache.get(f"voice:{name}") if cache is not None else None

    try:
        first = a.voices.save("desk", prompt(180), "", caller=LOCAL)
        assert local(a, "desk") is not None and local(b, "desk") is None
        replaced = b.voices.save("desk", prompt(240), "", replace=True, caller=LOCAL)  # replaced on B
        assert replaced["fingerprint"] != first["fingerprint"]
        assert a.voices.library.get("desk").prompt.fingerprint == replaced["fingerprint"]  # type: ignore[union-attr]
        assert local(a, "desk")["fingerprint"] == replaced["fingerprint"]  # type: ignore[index]  # copy updated
        b.voices.delete("desk", caller=LOCAL)
        assert a.voices.library.get("desk") is None and "desk" not in a.voices.library.names()
        assert local(a, "desk") is None  # the stale local copy is removed, not served
        a.voices.save("desk", prompt(200), "", caller=LOCAL)  # saved again after the deletion: newer than the tombstone
        assert b.voices.library.get("desk") is not None
    finally:
        a.close()
        b.close()


def test_voice_saved_while_redis_was_down_is_published_when_it_is_back(tmp_path: Path) -> None:
    own = RedisServer(require_redis_server()).start()
    svc = _service(tmp_path / "a", own.url)
    try:
        own.stop(kill=True)
        t = np.arange(2 * 16_000) / 16_000
        audio = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype("float32")
        svc.voices.save("offline", (16_000, audio), "", caller=LOCAL)  # local only
        with pytest.raises(StoreUnavailableError, match="other replicas would keep"):
            svc.voices.delete("offline", caller=LOCAL)  # would not reach Redis: refused, nothing changed
        assert svc.voices.library.get("offline") is not None
        own.start()
        client = own.client()
        try:
            assert wait_until(lambda: svc.cache.shared is not None and svc.cache.shared.up)
            svc.voices.library._memory.clear()  # past the freshness window
            assert "offline" in svc.voices.library.names()
            assert client.sismember("tts:voices", "offline")  # published by its replica
        finally:
            client.close()
    finally:
        svc.close()
        own.close()


def test_an_expired_entry_in_redis_is_not_served_nor_copied_to_disk(
    tmp_path: Path, server: RedisServer, raw: redis.Redis
) -> None:
    """An entry whose own expiry has passed (a copy that outlived its Redis TTL, e.g. a
    restored dump) is a miss, and never lands in a replica's disk tier."""
    svc = _service(tmp_path / "a", server.url)
    try:
        request = TTSRequest(text="an announcement that expired", voice="tone-low", ttl=3600)
        key = svc.resolve(request).key
        pcm = (np.sin(np.arange(4410) / 5.0) * 9000).astype(np.int16)
        stale = CachedAudio.from_pcm(key, pcm, 22050, {"engine": "tone", "expires": time.time() - 60})
        raw.set(f"tts:a:{key}", pack(stale))  # no Redis TTL: only the entry knows it is stale
        result = svc.synthesise(request)
        svc.cache.flush()
        assert result.cache == "MISS" and svc.engine.calls == 1  # type: ignore[attr-defined]
        on_disk = svc.cache.store.get(key)
        assert on_disk is not None and not np.array_equal(on_disk.pcm, pcm)
        assert on_disk.remaining() is not None and on_disk.remaining() > 3000  # type: ignore[operator]
    finally:
        svc.close()
        raw.delete(f"tts:a:{key}")
