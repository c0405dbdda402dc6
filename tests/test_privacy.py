"""Privacy flags end to end: ``store=false`` and bypassed requests leave no trace of their
text or prompt on disk or in Redis; ``cache.store_text: false`` keeps texts out of the
statistics too; the statistics keep at most ``cache.stats_phrases`` texts; voice
profiles are bounded and emptied by clear (saved voices stay); logs hold at most 32
characters of user text.

The checks read every byte the service left: every file under the cache directory
(SQLite databases, their WAL, value files) and every key and value in Redis.
"""

from __future__ import annotations

import contextlib
import io
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
import soundfile as sf
from conftest import in_process
from redis_server import RedisServer, require_redis_server

from lib.api import create_app
from lib.audio.pcm import PromptAudio
from lib.config import load_config
from lib.engines.base import VoiceProfile
from lib.engines.tone import ToneEngine
from lib.errors import TTSError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest


def prompt_wav(hz: float) -> bytes:
    t = np.arange(2 * 16_000) / 16_000
    samples = 0.3 * np.sin(2 * np.pi * hz * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))
    buf = io.BytesIO()
    sf.write(buf, samples.astype(np.float32), 16_000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def make(tmp: Path, engine: ToneEngine | None = None, **overrides: Any) -> TTSService:
    values = {"engine": "tone", "cache.dir": str(tmp), "voices.prewarm": False, **overrides}
    return TTSService(load_config(env={}, overrides=values), engine or ToneEngine(), admin_token="t")


def disk_bytes(directory: Path) -> bytes:
    """Every byte of every file under ``directory``."""
    return b"".join(p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file())


def redis_bytes(client: redis.Redis) -> bytes:
    """Every key and every value in Redis, whatever its type."""
    out: list[bytes] = []
    for name in client.scan_iter(count=1000):
        out.append(name)
        kind = client.type(name)
        if kind == b"string":
            out.append(client.get(name) or b"")
        elif kind == b"hash":
            out.extend(b"".join(kv) for kv in client.hgetall(name).items())
        elif kind == b"set":
            out.extend(client.smembers(name))
        elif kind == b"zset":
            out.extend(m for m, _ in client.zrange(name, 0, -1, withscores=True))
        elif kind == b"stream":
            out.extend(b"".join(k + v for k, v in fields.items()) for _, fields in client.xrange(name))
        elif kind == b"list":
            out.extend(client.lrange(name, 0, -1))
    return b"\n".join(out)


class Traces:
    """What a request would leave behind: its text, key, prompt fingerprint, the key of
    its voice profile and a stretch of its prompt's samples."""

    def __init__(self, service: TTSService, text: str, audio: bytes, prompt_text: str = "") -> None:
        prompt: PromptAudio = service.voices.decoder.decode(audio, remember=False)
        self.text = text
        self.key = service.resolve(TTSRequest(text=text, prompt_audio=audio, prompt_text=prompt_text)).key
        self.needles = {
            "text": text.encode(),
            "key": self.key.encode(),
            "fingerprint": prompt.fingerprint.encode(),
            "profile key": service.voices.profiles.key(prompt.fingerprint, prompt_text).encode(),
            "samples": prompt.pcm[8000:8064].astype("<i2").tobytes(),
        }
        service.voices.decoder.clear()

    def found_in(self, blob: bytes) -> list[str]:
        return [what for what, needle in self.needles.items() if needle in blob]


def private_requests(service: TTSService, text: str, audio: bytes) -> None:
    """The same private request three ways: store=false (twice: miss, then miss again),
    a bypass, and store=false as a transcoded format."""
    for fields in ({"store": False}, {"store": False}, {"use_cache": False}, {"store": False, "format": "mp3"}):
        result = service.synthesise(TTSRequest(text=text, prompt_audio=audio, **fields))
        assert result.cache in ("MISS", "BYPASS")


def test_store_false_and_bypass_leave_no_trace_on_disk(tmp_path: Path) -> None:
    service = make(tmp_path / "cache")
    secret = f"Patient {uuid.uuid4().hex[:8]} has an appointment at the oncology desk."
    audio = prompt_wav(173.0)
    traces = Traces(service, secret, audio)
    try:
        private_requests(service, secret, audio)
        assert service.engine.extract_calls == 1  # type: ignore[attr-defined]  # in memory, reused
        assert len(service.voices.decoder) == 0  # the prompt was not memoised
        assert service.cache.memory_entry(traces.key) is None and len(service.cache.transcodes) == 0
        snap = service.dashboard.snapshot(top=20, caller=LOCAL)
        assert snap["misses"] == 3 and snap["bypasses"] == 1  # counted ...
        assert secret not in repr(snap)  # ... without their text
        service.cache.flush()
    finally:
        service.close()  # flushes the statistics to disk
    assert traces.found_in(disk_bytes(tmp_path / "cache")) == []
    # The same request without the flags does leave those traces: the scan can see them.
    service = make(tmp_path / "cache")
    try:
        service.synthesise(TTSRequest(text=secret, prompt_audio=audio))
        service.cache.flush()
    finally:
        service.close()
    assert sorted(traces.found_in(disk_bytes(tmp_path / "cache"))) == ["fingerprint", "key", "profile key", "text"]


def test_store_false_and_bypass_leave_no_trace_in_redis(tmp_path: Path) -> None:
    with RedisServer(require_redis_server()) as server:
        service = make(tmp_path / "cache", **{"cache.shared_url": server.url})
        client = server.client()
        secret = f"Account {uuid.uuid4().hex[:8]} is overdrawn; please call the branch."
        audio = prompt_wav(191.0)
        traces = Traces(service, secret, audio)
        try:
            private_requests(service, secret, audio)
            service.cache.flush()
            assert service.cache.shared is not None and service.cache.shared.status()["up"]
            assert traces.found_in(redis_bytes(client)) == []
            assert traces.found_in(disk_bytes(tmp_path / "cache")) == []
            assert not list(client.scan_iter(match="tts:p:*")) and not list(client.scan_iter(match="tts:lock:*"))
            service.synthesise(TTSRequest(text=secret, prompt_audio=audio))  # control
            service.cache.flush()
            assert {"key", "profile key", "text"} <= set(traces.found_in(redis_bytes(client)))
        finally:
            client.close()
            service.close()


def test_store_false_takes_no_single_flight_lease(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A lease would write the key into the lock store (or Redis) for a result that will
    # not be stored, and no other process could use that result anyway.
    service = make(tmp_path / "cache")
    taken: list[str] = []
    leases = service.singleflight.leases
    assert leases is not None
    real = leases.acquire
    monkeypatch.setattr(leases, "acquire", lambda key, lease: taken.append(key) or real(key, lease))
    try:
        private = service.synthesise(TTSRequest(text="no lease for me", voice="tone-low", store=False))
        assert private.cache == "MISS" and taken == []
        public = service.synthesise(TTSRequest(text="a lease for me", voice="tone-low"))
        assert taken == [public.key]
    finally:
        service.close()


def test_store_text_false_keeps_texts_out_of_entries_and_statistics(tmp_path: Path) -> None:
    service = make(tmp_path / "cache", **{"cache.store_text": False})
    secret = f"Parcel {uuid.uuid4().hex[:8]} for Mrs Wang at 12 Elm Street."
    try:
        for _ in range(2):
            service.synthesise(TTSRequest(text=secret, voice="tone-low"))
        service.cache.flush()
        snap = service.dashboard.snapshot(top=20, caller=LOCAL)
        assert snap["hits"] == 1 and snap["misses"] == 1 and snap["top_requested"] == []
        entry = service.cache.store.get(service.resolve(TTSRequest(text=secret, voice="tone-low")).key)
        assert entry is not None and "text" not in entry.meta  # stored, without its text
    finally:
        service.close()
    assert secret.encode() not in disk_bytes(tmp_path / "cache")


def test_statistics_keep_at_most_stats_phrases_texts(tmp_path: Path) -> None:
    service = make(tmp_path / "cache", **{"cache.stats_phrases": 5})
    try:
        for i in range(12):
            for _ in range(1 + i % 3):  # some are asked more often
                service.synthesise(TTSRequest(text=f"phrase number {i}", voice="tone-low"))
        service.dashboard.stats.flush()
        with service.dashboard.stats._store.using("test") as cache:  # type: ignore[union-attr]
            table = cache.get("phrases") if cache is not None else None
        assert table is not None and len(table) == 5  # on disk: the five most requested
        assert sorted(row["count"] for row in table.values()) == [2, 3, 3, 3, 3]
        assert len(service.dashboard.snapshot(top=50, caller=LOCAL)["top_requested"]) == 5
    finally:
        service.close()


# -- voice profiles: derived data, bounded, cleared -----------------------------------------------


class BigProfiles(ToneEngine):
    """Profiles of 300 KB, so that a 1 MiB budget holds three of them."""

    def extract_voice(self, prompt_pcm: Any, prompt_text: str) -> VoiceProfile:
        base = super().extract_voice(prompt_pcm, prompt_text)
        blob = np.resize(np.asarray(prompt_pcm, dtype=np.int16), 150_000).tobytes()
        return VoiceProfile(base.engine, base.model_version, base.kind, base.params, blob)


def profile_keys(service: TTSService) -> list[str]:
    with service.voices.profiles.store.using("test") as cache:
        return [str(k) for k in cache.iterkeys()] if cache is not None else []


def test_voice_profiles_are_bounded_on_disk_and_saved_voices_are_not(tmp_path: Path) -> None:
    engine = BigProfiles()
    service = make(tmp_path / "cache", engine, **{"voices.profile_bytes": "1MiB", "voices.memory_bytes": 0})
    try:
        for i in range(8):
            service.voices.save(f"voice {i}", prompt_wav(150.0 + 10 * i), caller=LOCAL)
        assert engine.extract_calls == 8
        with service.voices.profiles.store.using("test") as cache:
            assert cache is not None and cache.volume() <= 1024**2 + 310_000  # at most one profile over
        assert 0 < len(profile_keys(service)) < 8  # the least recently used were evicted ...
        assert [v["name"] for v in service.voices.list(caller=LOCAL) if v["kind"] == "saved"] == [
            f"voice {i}" for i in range(8)
        ]
        service.synthesise(TTSRequest(text="hello", voice="voice 0"))  # ... and are extracted again when needed
        assert engine.extract_calls == 9
        assert not any(k.startswith("profile:") for k in _voice_keys(service))  # not beside the saved voices
    finally:
        service.close()


def _voice_keys(service: TTSService) -> list[str]:
    with service.voices.library.store.using("test") as cache:
        return [str(k) for k in cache.iterkeys()] if cache is not None else []


def test_clear_empties_the_voice_profiles_and_keeps_saved_voices(tmp_path: Path) -> None:
    with RedisServer(require_redis_server()) as server:
        service = make(tmp_path / "cache", **{"cache.shared_url": server.url})
        client = server.client()
        try:
            service.voices.save("desk", prompt_wav(200.0), caller=LOCAL)
            service.synthesise(TTSRequest(text="uploaded", prompt_audio=prompt_wav(210.0)))
            service.cache.flush()
            assert len(profile_keys(service)) == 2 and len(list(client.scan_iter(match="tts:p:*"))) == 2
            assert len(service.voices.decoder) >= 1
            report = service.admin.clear(caller=LOCAL)
            assert report["profiles_removed"] == 2
            assert profile_keys(service) == [] and list(client.scan_iter(match="tts:p:*")) == []
            assert len(service.voices.decoder) == 0 and len(service.voices.profiles._memory) == 0
            assert service.voices.library.get("desk") is not None  # the user's own voice stays
            assert client.exists("tts:v:desk") == 1
        finally:
            client.close()
            service.close()


def test_profiles_left_beside_saved_voices_by_older_versions_are_dropped(tmp_path: Path) -> None:
    service = make(tmp_path / "cache")
    service.voices.save("desk", prompt_wav(200.0), caller=LOCAL)
    with service.voices.library.store.using("test") as cache:
        assert cache is not None
        cache.set("profile:" + "0" * 32, b"an old profile")
    service.close()
    service = make(tmp_path / "cache")
    try:
        assert _voice_keys(service) == ["voice:desk"]
    finally:
        service.close()


# -- logs ------------------------------------------------------------------------------------------


def leaked(records: list[logging.LogRecord], secret: str) -> list[str]:
    """Log lines holding more than 32 consecutive characters of ``secret``."""
    pieces = {secret[i : i + 33] for i in range(len(secret) - 32)}
    out = []
    for record in records:
        if record.name.startswith(("httpx", "httpcore")):
            continue  # the test's own HTTP client, not the server
        line = record.getMessage()
        if record.exc_info:
            line += logging.Formatter().formatException(record.exc_info)
        if any(piece in line for piece in pieces):
            out.append(line)
    return out


@pytest.fixture
def secret() -> str:
    return "PRIVATE-" + uuid.uuid4().hex + "-" + uuid.uuid4().hex  # 73 characters nobody else writes


def test_service_logs_hold_at_most_32_characters_of_user_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, secret: str
) -> None:
    engine = ToneEngine()
    service = make(tmp_path / "cache", engine)
    caplog.set_level(logging.DEBUG)
    attempts: list[dict[str, Any]] = [
        {"text": secret, "voice": "tone-low"},  # a miss, then a hit
        {"text": secret, "voice": "tone-low"},
        {"text": secret, "voice": secret[:60]},  # an unknown voice: 404
        {"text": secret, "voice": "tone-low", "style": secret, "mode": "instruct"},
        {"text": secret, "prompt_audio": prompt_wav(180.0), "prompt_text": secret},
        {"text": secret * 20, "voice": "tone-low"},  # too long: 400
        {"text": secret, "voice": "tone-low", "format": secret},
        {"text": secret, "voice": "tone-low", "mode": secret},
        {"text": secret, "voice": "tone-low", "seed": secret},
    ]
    try:
        for fields in attempts:
            with contextlib.suppress(TTSError):
                service.synthesise(TTSRequest(**fields))
        engine.fail = RuntimeError(f"the engine choked on {secret}")  # an engine quoting the text
        with pytest.raises(TTSError):
            service.synthesise(TTSRequest(text=secret + " again", voice="tone-low"))
        engine.fail = None
        for name in (secret[:60], secret):
            with contextlib.suppress(TTSError):
                service.voices.save(name, prompt_wav(190.0), secret, caller=LOCAL)
        for call in (
            lambda: service.voices.delete(secret[:60], caller=LOCAL),
            lambda: service.voices.delete(secret, caller=LOCAL),
            lambda: service.admin.evict("voice:" + secret, caller=LOCAL),
        ):
            with contextlib.suppress(TTSError):
                call()
        service.cache.flush()
    finally:
        service.close()
    assert len(caplog.records) > 10  # the paths above did log
    assert leaked(caplog.records, secret) == []


def test_http_logs_hold_at_most_32_characters_of_user_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, secret: str
) -> None:
    engine = ToneEngine()
    service = make(tmp_path / "cache", engine)
    caplog.set_level(logging.DEBUG)
    try:
        with in_process(create_app(service)) as http:
            http.post("/api/tts", data={"text": secret, "voice": "tone-low"})
            http.post("/api/tts", data={"text": secret, "voice": secret})
            http.post("/v1/audio/speech", json={"input": secret, "voice": secret})
            http.post("/api/voices", data={"name": secret}, files={"prompt_audio": ("p.wav", prompt_wav(200.0))})
            http.delete(f"/api/voices/{secret}", headers={"Authorization": "Bearer t"})
            http.post("/api/cache/clear", json={"tag": secret}, headers={"Authorization": "Bearer t"})
            engine.fail = ValueError(secret)
            assert http.post("/api/tts", data={"text": secret + "!", "voice": "tone-low"}).status_code == 500
    finally:
        service.close()
    assert len(caplog.records) > 3
    assert leaked(caplog.records, secret) == []


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("TTS_ADMIN_TOKEN", raising=False)
    yield
