"""Entries that cannot be forged (issue 35, item 5): with ``cache.secret`` every value the
shared tiers hold carries an HMAC tag over its key and bytes, and one without a valid tag
is never served. Against the real ``redis-server`` and the real S3-protocol server the
tests start: a forged entry (another key's audio under this key's header, its CRC valid)
is a MISS on a cold replica, made again and written over; the 302 never points at a
forged copy; old secrets are accepted after a rotation; untagged entries are refused with
a secret and served without one; saved voices and approved takes are refused when forged;
the secret is never shown."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis
from conftest import in_process
from redis_server import RedisServer, require_redis_server
from s3_server import S3Server

from lib.api import create_app
from lib.cache.entry import CachedAudio, pack, unpack
from lib.cache.signing import Signer
from lib.config import load_config
from lib.errors import ConfigError, NotFoundError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from lib.shared.codec import encode_voice

SECRET = "the-replicas-shared-secret-0123456789"
OLD = "the-secret-before-the-rotation-42"
WRONG = "a-forgers-guess-at-the-secret-000"

Make = Callable[..., TTSService]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer(require_redis_server()) as running:
        yield running


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client of the test's Redis, emptied first (the services share the ``tts:`` namespace)."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3Server.env().items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def bucket(s3: S3Server) -> str:
    """An object-store URL under a prefix of the test's own."""
    return s3.url(f"sig{uuid.uuid4().hex[:8]}")


def req(text: str, **fields: Any) -> TTSRequest:
    return TTSRequest(text=text, voice="tone-low", **fields)


def forged(audio: CachedAudio, key: str, secret: str | None = WRONG) -> bytes:
    """``audio`` packed under ``key``'s name: the header names ``key``, the CRC is valid;
    tagged with ``secret`` (a forger's guess), or untagged (None)."""
    blob = pack(CachedAudio(key, audio.sample_rate, audio.wav, audio.meta))
    assert pcm(unpack(blob, key)) == pcm(audio)  # the CRC and the key check pass: only a tag can tell
    return Signer(secret).sign("entry", key, blob) if secret else blob


def pcm(audio: Any) -> bytes:
    """The samples of a result or an entry (its WAV also holds a label naming its key)."""
    return bytes(getattr(audio, "audio", audio).pcm.tobytes())


def rejected(service: TTSService, tier: str) -> float:
    text = service.dashboard.metrics.exposition().decode()
    match = re.search(rf'^tts_shared_entries_rejected_total\{{tier="{tier}"\}} (\S+)$', text, re.MULTILINE)
    assert match is not None
    return float(match.group(1))


def calls(service: TTSService) -> int:
    return int(service.engine.calls)  # type: ignore[attr-defined]


def objects_of(service: TTSService) -> Any:
    assert service.cache.objects is not None
    return service.cache.objects


def two_entries(maker: TTSService) -> tuple[Any, Any]:
    """Two results made and written to every tier: the one asked for and the forger's audio."""
    wanted = maker.synthesise(req("Platform four, the train to Oxford."))
    other = maker.synthesise(req("Mind the gap between the train and the platform edge."))
    maker.cache.flush()
    assert pcm(wanted) != pcm(other)
    return wanted, other


# -- results ----------------------------------------------------------------------------------


def test_a_forged_object_is_not_served_by_a_cold_replica_but_made_again_and_written_over(
    make_service: Make, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    maker = make_service(**{"cache.objects_url": bucket, "cache.secret": SECRET})
    wanted, other = two_entries(maker)
    store = objects_of(maker)
    for secret in (WRONG, None):  # a wrong tag, then none at all
        store.client.put(store.layout.entry(wanted.key), forged(other.audio, wanted.key, secret))
        cold = make_service(**{"cache.objects_url": bucket, "cache.secret": SECRET})
        with caplog.at_level(logging.WARNING):
            answer = cold.synthesise(req("Platform four, the train to Oxford."))
        cold.cache.flush()
        assert (answer.cache, calls(cold)) == ("MISS", 1)  # not a HIT: the engine made it
        assert answer.wav == wanted.wav and pcm(answer) != pcm(other)
        # Counted at each read of it (the lookup, and again under the key's single-flight lease).
        assert rejected(cold, "objects") >= 1.0 and rejected(cold, "shared") == 0.0
        assert objects_of(cold).status()["rejected"] == rejected(cold, "objects")
        rewritten = store.client.get(store.layout.entry(wanted.key))
        assert unpack(Signer(SECRET).open("entry", wanted.key, rewritten.body), wanted.key).wav == wanted.wav
    assert "objects tier: entry " + wanted.key in caplog.text


def test_without_a_secret_the_same_forgery_is_served_as_before(make_service: Make, bucket: str) -> None:
    """The hole the secret closes (and the behaviour without one, unchanged): the CRC alone
    lets a writer of the bucket put another key's audio under this key."""
    maker = make_service(**{"cache.objects_url": bucket})
    wanted, other = two_entries(maker)
    store = objects_of(maker)
    store.client.put(store.layout.entry(wanted.key), forged(other.audio, wanted.key, None))
    cold = make_service(**{"cache.objects_url": bucket})
    answer = cold.synthesise(req("Platform four, the train to Oxford."))
    assert (answer.cache, answer.info.get("tier"), calls(cold)) == ("HIT", "objects", 0)
    assert pcm(answer) == pcm(other) and rejected(cold, "objects") == 0.0
    assert not store.client.get(store.layout.entry(wanted.key)).body.endswith(b"TTSMAC01")  # no tag written


def test_a_forged_redis_entry_is_not_served_but_made_again_and_written_over(
    make_service: Make, redis_server: RedisServer, raw: redis.Redis
) -> None:
    maker = make_service(**{"cache.shared_url": redis_server.url, "cache.secret": SECRET})
    wanted, other = two_entries(maker)
    raw.set(f"tts:a:{wanted.key}", forged(other.audio, wanted.key))
    cold = make_service(**{"cache.shared_url": redis_server.url, "cache.secret": SECRET})
    answer = cold.synthesise(req("Platform four, the train to Oxford."))
    cold.cache.flush()
    assert (answer.cache, calls(cold), answer.wav) == ("MISS", 1, wanted.wav)
    assert rejected(cold, "shared") >= 1.0
    value = raw.get(f"tts:a:{wanted.key}")
    assert isinstance(value, bytes)
    assert unpack(Signer(SECRET).open("entry", wanted.key, value), wanted.key).wav == wanted.wav
    again = make_service(**{"cache.shared_url": redis_server.url, "cache.secret": SECRET})
    hit = again.synthesise(req("Platform four, the train to Oxford."))  # the entry written back is served
    assert (hit.cache, hit.info.get("tier"), calls(again)) == ("HIT", "shared", 0)


def test_a_rejection_is_logged_once_not_once_per_request(
    make_service: Make, redis_server: RedisServer, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    maker = make_service(**{"cache.shared_url": redis_server.url, "cache.secret": SECRET})
    wanted, other = two_entries(maker)
    raw.set(f"tts:a:{wanted.key}", forged(other.audio, wanted.key))
    cold = make_service(**{"cache.shared_url": redis_server.url, "cache.secret": SECRET})
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # store=false: nothing written over it, so each request meets the forgery
            answer = cold.synthesise(req("Platform four, the train to Oxford.", store=False))
            assert answer.cache != "HIT" and answer.wav == wanted.wav
    assert rejected(cold, "shared") >= 3.0
    assert sum("refused" in r.getMessage() for r in caplog.records) == 1


# -- the redirect -----------------------------------------------------------------------------


def test_the_redirect_never_points_at_a_forged_copy(make_service: Make, bucket: str) -> None:
    service = make_service(**{"cache.objects_url": bucket, "cache.secret": SECRET, "cache.objects_redirect": True})
    wanted, other = two_entries(service)
    store = objects_of(service)
    copy = store.layout.playable(wanted.key, "wav")
    with in_process(create_app(service)) as http:
        first = http.get(f"/api/audio/{wanted.key}.wav")
        assert first.status_code == 302
        assert httpx.get(first.headers["location"], timeout=30).content == wanted.wav
        genuine = store.client.head(copy)
        assert genuine is not None and genuine.metadata.get("mac")  # the copy carries its tag
        # The forger writes other audio over the copy, keeping its metadata (the tag of the genuine bytes).
        store.client.put(copy, other.wav, metadata=dict(genuine.metadata), content_type="audio/wav")
        second = http.get(f"/api/audio/{wanted.key}.wav")
        assert second.status_code == 302
        assert httpx.get(second.headers["location"], timeout=30).content == wanted.wav  # written over first
        assert rejected(service, "objects") == 1.0
        # A copy without a tag (made before the secret was set) is replaced by a tagged one.
        store.client.put(copy, wanted.wav, content_type="audio/wav")
        third = http.get(f"/api/audio/{wanted.key}.wav")
        assert third.status_code == 302 and httpx.get(third.headers["location"], timeout=30).content == wanted.wav
        assert store.client.head(copy).metadata.get("mac") and rejected(service, "objects") == 2.0


def test_a_cold_replica_never_redirects_to_a_forged_entry(make_service: Make, bucket: str) -> None:
    settings = {"cache.objects_url": bucket, "cache.secret": SECRET, "cache.objects_redirect": True}
    maker = make_service(**settings)
    wanted, other = two_entries(maker)
    store = objects_of(maker)
    store.client.put(store.layout.entry(wanted.key), forged(other.audio, wanted.key))
    store.client.put(store.layout.playable(wanted.key, "wav"), other.wav, content_type="audio/wav")  # untagged
    cold = make_service(**settings)
    with in_process(create_app(cold)) as http:
        answer = http.get(f"/api/audio/{wanted.key}.wav")
        assert answer.status_code == 404 and "location" not in answer.headers  # nothing verified to point at
        made = http.post("/api/tts", data={"text": "Platform four, the train to Oxford.", "voice": "tone-low"})
        assert made.headers["X-Cache"] == "MISS" and made.content == wanted.wav
        cold.cache.flush()
        answer = http.get(f"/api/audio/{wanted.key}.wav")
        assert answer.status_code == 302
        assert httpx.get(answer.headers["location"], timeout=30).content == wanted.wav


# -- rotation, untagged entries, no secret ----------------------------------------------------


def test_entries_tagged_with_an_old_secret_are_served_after_a_rotation(
    make_service: Make, redis_server: RedisServer, raw: redis.Redis, bucket: str
) -> None:
    tiers = {"cache.shared_url": redis_server.url, "cache.objects_url": bucket}
    before = make_service(**tiers, **{"cache.secret": OLD})
    wanted, _ = two_entries(before)
    rotated = make_service(**tiers, **{"cache.secret": SECRET, "cache.old_secrets": [OLD]})
    hit = rotated.synthesise(req("Platform four, the train to Oxford."))
    assert (hit.cache, hit.info.get("tier"), calls(rotated), hit.wav) == ("HIT", "shared", 0, wanted.wav)
    raw.flushall()  # Redis lost: the object store's entry, tagged with the old secret, still serves
    store = make_service(**tiers, **{"cache.secret": SECRET, "cache.old_secrets": [OLD]})
    hit = store.synthesise(req("Platform four, the train to Oxford."))
    assert (hit.cache, hit.info.get("tier"), calls(store)) == ("HIT", "objects", 0)
    forgot = make_service(**tiers, **{"cache.secret": SECRET})  # the old secret dropped: refused
    assert forgot.synthesise(req("Platform four, the train to Oxford.")).cache == "MISS"
    assert rejected(forgot, "objects") >= 1.0


def test_untagged_entries_are_refused_once_a_secret_is_set_and_served_without_one(
    make_service: Make, redis_server: RedisServer, raw: redis.Redis
) -> None:
    before = make_service(**{"cache.shared_url": redis_server.url})  # no secret: no tag
    wanted, _ = two_entries(before)
    value = raw.get(f"tts:a:{wanted.key}")
    assert isinstance(value, bytes) and not value.endswith(b"TTSMAC01")
    unset = make_service(**{"cache.shared_url": redis_server.url})
    assert unset.synthesise(req("Platform four, the train to Oxford.")).cache == "HIT"
    signed = make_service(**{"cache.shared_url": redis_server.url, "cache.secret": SECRET})
    answer = signed.synthesise(req("Platform four, the train to Oxford."))
    signed.cache.flush()
    assert (answer.cache, calls(signed), answer.wav) == ("MISS", 1, wanted.wav)
    assert rejected(signed, "shared") >= 1.0
    value = raw.get(f"tts:a:{wanted.key}")
    assert isinstance(value, bytes) and value.endswith(b"TTSMAC01")  # re-made, tagged
    later = make_service(**{"cache.shared_url": redis_server.url})  # the secret dropped again: served
    assert later.synthesise(req("Platform four, the train to Oxford.")).cache == "HIT"


def test_tagged_entries_are_still_evicted_by_their_tag(
    make_service: Make, redis_server: RedisServer, raw: redis.Redis, bucket: str
) -> None:
    """The tag is a trailer: what reads an entry's header alone (eviction by tag in Redis,
    the object store's index) reads a tagged entry as before."""
    service = make_service(
        **{"cache.shared_url": redis_server.url, "cache.objects_url": bucket, "cache.secret": SECRET}
    )
    wanted, other = two_entries(service)
    value = raw.get(f"tts:a:{wanted.key}")
    assert isinstance(value, bytes) and value.endswith(b"TTSMAC01")
    report = service.admin.evict(str(wanted.audio.meta["tag"]), caller=LOCAL)
    assert report["shared_removed"] == 2 and report["objects_removed"] == 2
    assert raw.get(f"tts:a:{wanted.key}") is None and raw.get(f"tts:a:{other.key}") is None
    store = objects_of(service)
    assert store.client.get(store.layout.entry(wanted.key)) is None


# -- saved voices and approved takes ----------------------------------------------------------


def _prompt(freq: float) -> tuple[int, Any]:
    t = np.arange(2 * 16_000) / 16_000
    return 16_000, (0.3 * np.sin(2 * np.pi * freq * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype("float32")


def test_a_forged_saved_voice_is_never_used(
    make_service: Make, redis_server: RedisServer, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lib.voices.library import VoiceLibrary

    monkeypatch.setattr(VoiceLibrary, "SHARED_FRESH_SECONDS", 0.0)
    settings = {"cache.shared_url": redis_server.url, "cache.secret": SECRET}
    owner = make_service(**settings)
    owner.voices.save("lobby", _prompt(180), "", caller=LOCAL)
    genuine = owner.synthesise(TTSRequest(text="Welcome to the lobby.", voice="lobby"))
    # The forger's voice: another recording under the same name, its CRC and name valid.
    decoy = make_service()
    decoy.voices.save("lobby", _prompt(300), "", caller=LOCAL)
    record, mine = decoy.voices.library._local("lobby"), owner.voices.library._local("lobby")
    assert record is not None and mine is not None and record.get("fingerprint") != mine.get("fingerprint")
    raw.set("tts:v:lobby", encode_voice("lobby", record))  # untagged
    cold = make_service(**settings)
    with pytest.raises(NotFoundError):
        cold.synthesise(TTSRequest(text="Welcome to the lobby.", voice="lobby"))
    assert rejected(cold, "shared") >= 1.0
    owner.voices.list(caller=LOCAL)  # the owner finds Redis without it and writes its own back
    answer = cold.synthesise(TTSRequest(text="Welcome to the lobby.", voice="lobby"))
    assert answer.wav == genuine.wav


def test_a_forged_voice_profile_is_extracted_again(
    make_service: Make, redis_server: RedisServer, raw: redis.Redis
) -> None:
    settings = {"cache.shared_url": redis_server.url, "cache.secret": SECRET}
    owner = make_service(**settings)
    owner.voices.save("lobby", _prompt(180), "", caller=LOCAL)
    genuine = owner.synthesise(TTSRequest(text="Welcome to the lobby.", voice="lobby"))
    lobby = set(raw.keys("tts:p:*"))
    owner.voices.save("hall", _prompt(300), "", caller=LOCAL)
    owner.synthesise(TTSRequest(text="Welcome to the hall.", voice="hall"))
    (hall,) = set(raw.keys("tts:p:*")) - lobby
    (target,) = lobby
    raw.set(target, raw.get(hall))  # the hall's profile (validly tagged, for its own key) under the lobby's
    cold = make_service(**settings)
    answer = cold.synthesise(TTSRequest(text="Welcome back to the lobby.", voice="lobby"))  # a miss: the profile
    assert cold.engine.extract_calls == 1  # type: ignore[attr-defined]  # not taken from Redis: made again
    assert rejected(cold, "shared") >= 1.0
    expected = owner.synthesise(TTSRequest(text="Welcome back to the lobby.", voice="lobby", use_cache=False))
    assert pcm(answer) == pcm(expected)
    fresh = make_service(**settings)  # the profile written back is the lobby's own, and is used
    again = fresh.synthesise(TTSRequest(text="Welcome, the lobby is open.", voice="lobby"))
    assert fresh.engine.extract_calls == 0 and rejected(fresh, "shared") == 0.0  # type: ignore[attr-defined]
    assert again.cache == "MISS" and genuine.cache == "MISS"


def test_a_forged_approved_take_is_not_adopted(make_service: Make, redis_server: RedisServer, raw: redis.Redis) -> None:
    settings = {"cache.shared_url": redis_server.url, "cache.secret": SECRET}
    owner = make_service(**settings)
    approved = owner.synthesise(req("Gate twelve is now boarding.", seed=3))
    other = owner.synthesise(req("Gate twelve is now boarding.", seed=4))
    owner.takes.approve(approved.key, caller=LOCAL)
    phrase = approved.audio.meta["phrase"]
    cold = make_service(**settings)
    assert cold.takes.book.poll() and cold.takes.book.get(phrase) is not None  # the genuine one is adopted
    cold.close()
    # The forger puts the other take's audio under the approved take's key (its CRC valid).
    raw.hset("tts:takes:audio", approved.key, forged(other.audio, approved.key))
    raw.incr("tts:takes:rev")
    cold = make_service(**settings)
    assert cold.takes.book.poll()
    assert cold.takes.book.get(phrase) is None and cold.takes.book.entry(approved.key) is None
    assert rejected(cold, "shared") >= 1.0
    answer = cold.synthesise(req("Gate twelve is now boarding."))
    assert answer.take != "approved" and pcm(answer) != pcm(other)
    # A forged record (pointing the phrase at the other take) is not adopted either.
    record = raw.hget("tts:takes", phrase)
    assert isinstance(record, bytes)
    text = record[:-40].decode().replace(approved.key, other.key)
    raw.hset("tts:takes", phrase, text)
    raw.hset("tts:takes:audio", other.key, Signer(SECRET).sign("take-audio", other.key, pack(other.audio)))
    raw.incr("tts:takes:rev")
    fresh = make_service(**settings)
    assert fresh.takes.book.poll() and fresh.takes.book.get(phrase) is None


# -- the secret itself ------------------------------------------------------------------------


def test_the_secret_comes_from_yaml_and_the_environment_and_is_never_shown(
    make_service: Make, redis_server: RedisServer, raw: redis.Redis, bucket: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    config = tmp_path / "config.yaml"
    config.write_text(f"cache:\n  secret: {SECRET}\n  old_secrets: [{OLD}]\n", encoding="utf-8")
    loaded = load_config(config, env={})
    assert (loaded.cache.secret, loaded.cache.old_secrets) == (SECRET, (OLD,))
    env = load_config(env={"TTS_CACHE_SECRET": "0x" + "1f" * 10, "TTS_CACHE_OLD_SECRETS": f"{OLD}, {SECRET}"})
    assert env.cache.secret == "0x" + "1f" * 10 and env.cache.old_secrets == (OLD, SECRET)  # as written, not YAML
    assert SECRET not in repr(loaded) and OLD not in repr(loaded)
    for bad, where in (
        ({"TTS_CACHE_SECRET": "short-secret"}, r"cache\.secret: must be at least 16 bytes, got 12"),
        (
            {"TTS_CACHE_SECRET": SECRET, "TTS_CACHE_OLD_SECRETS": "tiny"},
            r"cache\.old_secrets: each must be at least 16",
        ),
    ):
        with pytest.raises(ConfigError, match=where) as error:
            load_config(env=bad)
        assert "short-secret" not in str(error.value) and "tiny" not in str(error.value)
    with pytest.raises(ConfigError, match=r"cache\.secret") as error:
        load_config(env={}, overrides={"cache.secret": ["not", SECRET]})
    assert SECRET not in str(error.value)
    settings = {"cache.shared_url": redis_server.url, "cache.objects_url": bucket, "cache.objects_redirect": True}
    with caplog.at_level(logging.DEBUG):
        maker = make_service(**settings, **{"cache.secret": SECRET, "cache.old_secrets": [OLD]})
        wanted, other = two_entries(maker)
        raw.set(f"tts:a:{wanted.key}", forged(other.audio, wanted.key))
        cold = make_service(**settings, **{"cache.secret": SECRET, "cache.old_secrets": [OLD]})
        with in_process(create_app(cold)) as http:
            shown = [
                http.post("/api/tts", data={"text": "Platform four, the train to Oxford.", "voice": "tone-low"}).text,
                http.get(f"/api/audio/{wanted.key}.wav").headers.get("location", ""),
                http.get("/healthz").text, http.get("/api/cache/stats").text, http.get("/metrics").text,
            ]  # fmt: skip
    assert rejected(cold, "shared") >= 1.0 and "refused" in caplog.text
    everything = "".join(shown) + caplog.text + repr(cold.config) + repr(cold.dashboard.snapshot(caller=LOCAL))
    assert SECRET not in everything and OLD not in everything
