"""The cached synthesis core, with the deterministic tone engine and a real diskcache
store under tmp_path."""

from __future__ import annotations

import io
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from lib.cache.entry import CachedAudio
from lib.cache.store import directory_bytes
from lib.config import AppConfig, load_config
from lib.engines.tone import ToneEngine
from lib.errors import EngineError, NotAudioError, NotFoundError, PromptAudioError, ValidationError
from lib.pipeline.service import TTSService, synthesise_with_cache
from lib.request.access import LOCAL
from lib.request.types import TTSRequest

TESTDATA = Path(
    os.environ.get("TTS_TESTDATA_DIR") or Path(__file__).resolve().parents[1].parent / "shared" / "testdata" / "voices"
)


def make_config(cache_dir: Path, **overrides: Any) -> AppConfig:
    values: dict[str, Any] = {"engine": "tone", "cache.dir": str(cache_dir), "voices.prewarm": False}
    values.update(overrides)
    return load_config(env={}, overrides=values)


@pytest.fixture
def engine() -> ToneEngine:
    return ToneEngine()


@pytest.fixture
def service(tmp_path: Path, engine: ToneEngine) -> Iterator[TTSService]:
    svc = TTSService(make_config(tmp_path / "cache"), engine)
    yield svc
    svc.close()


def cache_errors(svc: TTSService) -> float:
    """Sum of tts_cache_errors_total over every operation."""
    text = svc.dashboard.metrics.exposition().decode()
    return sum(float(m) for m in re.findall(r'^tts_cache_errors_total\{op="[a-z]+"\} (\S+)$', text, re.M))


def speak(svc: TTSService, text: str = "hello there", **fields: Any) -> Any:
    fields.setdefault("voice", "tone-low")
    return synthesise_with_cache(text, service=svc, **fields)


def tone_prompt(seconds: float = 2.0, rate: int = 22_050, hz: float = 180.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * hz * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)


# -- hits, misses, bypass --------------------------------------------------------------


def test_miss_then_hit_with_identical_audio(service: TTSService, engine: ToneEngine) -> None:
    first = speak(service)
    second = speak(service)
    assert (first.cache, second.cache) == ("MISS", "HIT")
    assert first.key == second.key and len(first.key) == 32
    assert first.wav == second.wav
    assert engine.calls == 1
    data, rate = sf.read(first.path, dtype="int16")
    assert rate == 22_050 and np.array_equal(data, first.audio.pcm)
    assert first.duration == pytest.approx(len(data) / rate)


def test_normalised_text_shares_an_entry(service: TTSService, engine: ToneEngine) -> None:
    speak(service, "Hello\u3000 there")
    again = speak(service, "  Hello there\u200b ")
    assert again.cache == "HIT" and engine.calls == 1


def test_bypass_neither_reads_nor_writes(service: TTSService, engine: ToneEngine) -> None:
    speak(service)
    bypass = speak(service, use_cache=False)
    assert bypass.cache == "BYPASS" and engine.calls == 2
    fresh = speak(service, "never stored", use_cache=False)
    assert fresh.cache == "BYPASS"
    assert service.cache.lookup(fresh.key) is None


def test_no_store_reads_but_never_writes(service: TTSService, engine: ToneEngine) -> None:
    private = speak(service, "personal data", store=False)
    service.cache.flush()
    assert private.cache == "MISS"
    assert service.cache.lookup(private.key) is None and not service.cache.store.contains(private.key)
    speak(service, "shared phrase")
    assert speak(service, "shared phrase", store=False).cache == "HIT"


def test_output_format_is_not_in_the_key(service: TTSService) -> None:
    wav = speak(service, format="wav")
    mp3 = speak(service, format="mp3")
    assert mp3.key == wav.key and mp3.cache == "HIT"
    encoded = service.cache.audio_bytes(mp3.audio, "mp3")
    assert encoded[:3] == b"ID3" or encoded[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2")
    assert service.cache.audio_bytes(mp3.audio, "mp3") is encoded  # transcode kept in memory


def test_persistence_across_reopening(tmp_path: Path) -> None:
    first_engine, second_engine = ToneEngine(), ToneEngine()
    svc = TTSService(make_config(tmp_path / "c"), first_engine)
    made = speak(svc)
    svc.close()
    svc = TTSService(make_config(tmp_path / "c"), second_engine)
    try:
        again = speak(svc)
        assert again.cache == "HIT" and again.info["tier"] == "disk" and again.wav == made.wav
        assert second_engine.calls == 0
        snap = svc.dashboard.snapshot(caller=LOCAL)
        assert snap["misses_total"] == 1 and snap["hits_total"] == 1 and snap["hits"] == 1 and snap["misses"] == 0
    finally:
        svc.close()


def test_prompt_fingerprint_ignores_the_container(service: TTSService, engine: ToneEngine, tmp_path: Path) -> None:
    audio = (tone_prompt() * 32767).astype(np.int16)  # one 16-bit recording, two containers
    as_wav, as_flac = io.BytesIO(), io.BytesIO()
    sf.write(as_wav, audio, 22_050, format="WAV", subtype="PCM_16")
    sf.write(as_flac, audio, 22_050, format="FLAC", subtype="PCM_16")
    one = speak(service, voice=None, prompt_audio=as_wav.getvalue())
    two = speak(service, voice=None, prompt_audio=as_flac.getvalue())
    assert one.key == two.key and two.cache == "HIT"
    assert engine.extract_calls == 1
    at_16k = (np.arange(32_000) % 200 * 100 - 10_000).astype(np.int16)
    assert np.array_equal(service.voices.decoder.decode((16_000, at_16k)).pcm, at_16k)  # canonical rate: bit-exact


def test_voice_profile_is_extracted_once(service: TTSService, engine: ToneEngine) -> None:
    prompt = TESTDATA / "male_prompt.wav"
    if not prompt.exists():
        pytest.skip(f"test voices not found at {TESTDATA}")
    for text in ("one", "two", "three"):
        speak(service, text, voice=None, prompt_audio=str(prompt))
    assert engine.extract_calls == 1 and engine.calls == 3


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "error", "words"),
    [
        ({"text": "   \u200b "}, ValidationError, "text: is empty"),
        ({"text": "x" * 1001}, ValidationError, "over the limit of 1000"),
        ({"seed": -1}, ValidationError, "seed"),
        ({"seed": 2**32}, ValidationError, "seed"),
        ({"speed": 0.2}, ValidationError, "speed"),
        ({"speed": 4.5}, ValidationError, "speed"),
        ({"style": "s" * 4097}, ValidationError, "style"),
        ({"format": "aiff"}, ValidationError, "format"),
        ({"voice": "nobody"}, NotFoundError, "no saved or preset voice"),
        ({"voice": None}, ValidationError, "no voice"),
        ({"voice": None, "prompt_audio": b"not audio at all"}, NotAudioError, "not decodable"),
        ({"voice": None, "prompt_audio": (22_050, tone_prompt(0.5))}, PromptAudioError, "at least 1 s"),
        ({"voice": None, "prompt_audio": (22_050, tone_prompt(31))}, PromptAudioError, "at most 30 s"),
        ({"voice": None, "prompt_audio": (16_000, np.zeros(32_000, np.float32))}, PromptAudioError, "silent"),
        ({"mode": "zero_shot", "voice": None, "prompt_audio": (22_050, tone_prompt())}, ValidationError, "transcript"),
        ({"mode": "instruct"}, ValidationError, "style instruction"),
    ],
)
def test_bad_requests_are_refused_and_nothing_is_cached(
    service: TTSService, engine: ToneEngine, fields: dict[str, Any], error: type[Exception], words: str
) -> None:
    request = {"text": "hello", "voice": "tone-low", **fields}
    with pytest.raises(error, match=words):
        service.synthesise(TTSRequest(**request))
    assert engine.calls == 0 and service.cache.store.stats()["entries"] == 0
    assert service.dashboard.snapshot(caller=LOCAL)["errors"] == 1


def test_unused_fields_do_not_split_the_cache(tmp_path: Path) -> None:
    class NoStyleEngine(ToneEngine):
        style_modes = frozenset({"instruct"})

    svc = TTSService(make_config(tmp_path / "c"), NoStyleEngine())
    try:
        plain = speak(svc, "welcome")
        styled = speak(svc, "welcome", style="slow", mode="preset")
        assert styled.key == plain.key and styled.cache == "HIT"
        cross = speak(svc, "welcome", voice=None, prompt_audio=(22_050, tone_prompt()), prompt_text="ignored")
        cross_again = speak(svc, "welcome", voice=None, prompt_audio=(22_050, tone_prompt()), mode="cross_lingual")
        assert cross.key != cross_again.key  # auto mode with a transcript is zero-shot
        assert speak(svc, "welcome", voice=None, prompt_audio=(22_050, tone_prompt()), prompt_text="x",
                     mode="cross_lingual").key == cross_again.key  # fmt: skip
    finally:
        svc.close()


# -- failures are never cached -------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        RuntimeError("Boom"),
        np.zeros(0, np.float32),
        np.full(1000, np.nan, np.float32),
        np.array([0.1, np.inf] * 500, np.float32),
        np.zeros(22_050, np.float32),
    ],
    ids=["raises", "empty", "nan", "inf", "silent"],
)
def test_failures_are_not_cached(service: TTSService, engine: ToneEngine, bad: Any) -> None:
    if isinstance(bad, Exception):
        engine.fail = bad
    else:
        engine.output_override = bad
    with pytest.raises(EngineError, match="nothing was cached"):
        speak(service)
    assert service.cache.store.stats()["entries"] == 0 and len(service.cache.memory) == 0
    engine.fail = engine.output_override = None
    assert speak(service).cache == "MISS"
    assert engine.calls == 2


# -- the store: size limit, TTL, corruption, tags, verify ----------------------------------


@pytest.mark.slow
def test_size_limit_holds_after_writing_three_times_the_limit(tmp_path: Path) -> None:
    limit = 2 * 1024 * 1024
    engine = ToneEngine(seconds_per_char=0.5)  # about 22 KB of FLAC per 2-char text
    svc = TTSService(make_config(tmp_path / "c", **{"cache.size_limit": limit, "cache.memory_bytes": 0}), engine)
    try:
        written = biggest = 0
        n = 0
        while written < 3 * limit:
            result = speak(svc, f"p{n:03d}")
            svc.cache.flush()  # new entries are written in the background
            blob = svc.cache.store.get_blob(result.key)
            if blob is not None:
                written += len(blob)
                biggest = max(biggest, len(blob))
            n += 1
            assert svc.cache.store.stats()["bytes"] <= limit + biggest
        audio_dir = tmp_path / "c" / "audio"
        value_files = directory_bytes(audio_dir) - sum(p.stat().st_size for p in audio_dir.glob("cache.db*"))
        assert value_files <= limit + biggest
        assert svc.cache.store.stats()["entries"] < n  # something was evicted
        assert speak(svc, f"p{n - 1:03d}").cache == "HIT"  # the newest survived
    finally:
        svc.close()


def test_oversized_entry_is_served_but_not_stored(tmp_path: Path) -> None:
    engine = ToneEngine(seconds_per_char=1.0)
    config = make_config(tmp_path / "c", **{"cache.size_limit": 1024 * 1024, "cache.max_entry_fraction": 0.01})
    svc = TTSService(config, engine)
    try:
        result = speak(svc, "a long announcement")
        assert result.cache == "MISS" and result.duration > 10
        svc.cache.flush()
        assert svc.cache.store.stats()["entries"] == 0
    finally:
        svc.close()


def test_ttl_expiry(service: TTSService, engine: ToneEngine) -> None:
    speak(service, "short lived", ttl=0.3)
    assert speak(service, "short lived").cache == "HIT"
    time.sleep(0.5)
    assert speak(service, "short lived").cache == "MISS"
    assert engine.calls == 2
    speak(service, "also short", ttl=0.2)
    time.sleep(0.3)
    assert service.admin.sweep_expired(caller=LOCAL)["expired_removed"] >= 1


def test_corrupted_file_is_detected_and_regenerated(tmp_path: Path) -> None:
    svc = TTSService(make_config(tmp_path / "c"), ToneEngine(seconds_per_char=0.3))
    made = speak(svc, "a phrase long enough to be stored in a file of its own")
    svc.close()
    files = [p for p in (tmp_path / "c" / "audio").rglob("*.val")]
    assert len(files) == 1
    raw = bytearray(files[0].read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    files[0].write_bytes(bytes(raw))
    engine = ToneEngine(seconds_per_char=0.3)
    svc = TTSService(make_config(tmp_path / "c"), engine)
    try:
        again = speak(svc, "a phrase long enough to be stored in a file of its own")
        assert again.cache == "MISS" and engine.calls == 1 and again.wav == made.wav
        assert speak(svc, "a phrase long enough to be stored in a file of its own").cache == "HIT"
        assert b'tts_cache_errors_total{op="corrupt"} 1.0' in svc.dashboard.metrics.exposition()
    finally:
        svc.close()


def test_verify_repairs(service: TTSService) -> None:
    good = speak(service, "good entry with some length to it")
    bad = speak(service, "bad entry with some length to it as well")
    service.cache.flush()
    blob = bytearray(service.cache.store.get_blob(bad.key) or b"")
    blob[-100] ^= 0x55
    service.cache.store.put_blob(bad.key, bytes(blob), tag=service.tag, ttl=None)
    report = service.admin.verify(caller=LOCAL)
    assert report["checked"] == 2 and report["corrupt_removed"] == 1
    assert service.cache.store.contains(good.key) and not service.cache.store.contains(bad.key)


def test_evict_by_model_tag_and_by_voice(service: TTSService) -> None:
    low = speak(service, "one", voice="tone-low")
    speak(service, "two", voice="tone-high")
    assert service.admin.evict("voice:preset:tone-low", caller=LOCAL)["removed"] == 1
    assert service.cache.lookup(low.key) is None
    assert service.admin.evict("tone:some-older-model", caller=LOCAL)["removed"] == 0
    assert service.admin.evict(service.tag, caller=LOCAL)["removed"] == 1
    assert service.cache.store.stats()["entries"] == 0


def test_clear(service: TTSService) -> None:
    speak(service, "one")
    speak(service, "two")
    assert service.admin.clear(caller=LOCAL)["removed"] == 2
    assert speak(service, "one").cache == "MISS"


def test_files_are_private(service: TTSService, tmp_path: Path) -> None:
    speak(service, "a phrase long enough to be stored in a file of its own " * 6)
    service.voices.save("front desk", (22_050, tone_prompt()), "", caller=LOCAL)
    service.cache.flush()
    root = tmp_path / "cache"
    assert any(root.rglob("*.val"))  # at least one value lives in a file of its own
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} is {oct(mode)}"


# -- degradation ---------------------------------------------------------------------------


def test_unusable_cache_directory_still_serves(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    engine = ToneEngine()
    svc = TTSService(make_config(blocker / "cache"), engine)
    try:
        assert speak(svc).cache == "MISS"
        assert speak(svc).cache == "HIT"  # the memory tier still works
        assert svc.dashboard.snapshot(caller=LOCAL)["cache_available"] is False
        assert cache_errors(svc) >= 1
    finally:
        svc.close()


def test_read_only_cache_directory_still_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lib.cache.handle

    monkeypatch.setattr(lib.cache.handle, "REOPEN_AFTER", 0.0)
    src = tmp_path / "cache"
    svc = TTSService(make_config(src), ToneEngine())
    stored = speak(svc, "stored before")
    svc.close()
    target = tmp_path / "ro"
    target.mkdir()
    if os.geteuid() == 0:
        rc = os.system(f"mount --bind '{src}' '{target}' && mount -o remount,bind,ro '{target}'")
        if rc != 0:
            pytest.skip("cannot make a read-only bind mount here")
    else:
        os.system(f"chmod -R a-w '{src}'")
        target = src
    engine = ToneEngine()
    try:
        svc = TTSService(make_config(target), engine)
        try:
            old = speak(svc, "stored before")
            assert old.wav == stored.wav
            new = speak(svc, "new phrase")
            assert new.cache == "MISS" and engine.calls <= 2
            svc.cache.flush()
            # The mechanism: the store could not write, counted it and says so.
            assert cache_errors(svc) >= 1
            health = svc.dashboard.health()
            assert health["status"] == "degraded" and any(r.startswith("audio store") for r in health["reasons"])
            if os.geteuid() == 0:  # writable again: the store reopens by itself
                assert os.system(f"mount -o remount,bind,rw '{target}'") == 0
                again = speak(svc, "after the remount")
                svc.cache.flush()
                assert svc.cache.store.contains(again.key)
        finally:
            svc.close()
    finally:
        if os.geteuid() == 0:
            assert os.system(f"umount '{target}' || umount -l '{target}'") == 0
        else:
            os.system(f"chmod -R u+w '{src}'")
    check = TTSService(make_config(src), ToneEngine())
    try:  # what was made while read-only never reached the disk
        assert check.cache.store.contains(stored.key) and not check.cache.store.contains(new.key)
    finally:
        check.close()


def test_cache_recovers_when_directory_appears(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lib.cache.handle

    monkeypatch.setattr(lib.cache.handle, "REOPEN_AFTER", 0.0)
    blocker = tmp_path / "later"
    blocker.write_text("in the way")
    svc = TTSService(make_config(blocker), ToneEngine())
    try:
        speak(svc, "first")
        assert svc.dashboard.snapshot(caller=LOCAL)["cache_available"] is False
        blocker.unlink()
        result = speak(svc, "second")
        svc.cache.flush()
        assert result.cache == "MISS" and svc.cache.store.contains(result.key)
    finally:
        svc.close()


# -- single-flight -------------------------------------------------------------------------


def test_32_threads_one_engine_call(tmp_path: Path) -> None:
    engine = ToneEngine(delay=0.3)
    svc = TTSService(make_config(tmp_path / "c"), engine)
    results: list[Any] = []
    barrier = threading.Barrier(32)

    def ask() -> None:
        barrier.wait()
        results.append(speak(svc, "everyone at once"))

    threads = [threading.Thread(target=ask) for _ in range(32)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert engine.calls == 1
        assert len(results) == 32 and len({r.wav for r in results}) == 1
        assert sorted(r.cache for r in results).count("MISS") == 1
        assert svc.cache.store.verify()["corrupt_removed"] == 0
    finally:
        svc.close()


_WORKER = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.cache.entry import CachedAudio
from lib.pipeline.service import TTSService, synthesise_with_cache
engine = ToneEngine(delay=0.5)
overrides = {"engine": "tone", "cache.dir": sys.argv[2], "voices.prewarm": False}
svc = TTSService(load_config(env={}, overrides=overrides), engine)
start_at = float(sys.argv[3])
out = []
def ask():
    while time.time() < start_at:
        time.sleep(0.001)
    r = synthesise_with_cache("across processes", voice="tone-low", service=svc)
    out.append((r.cache, r.key, len(r.wav)))
threads = [threading.Thread(target=ask) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
svc.close()
print("calls", engine.calls, "misses", sum(1 for c, _, _ in out if c == "MISS"), "keys", len({k for _, k, _ in out}))
"""


@pytest.mark.slow
def test_4_processes_one_engine_call(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parents[1])
    start_at = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, root, str(tmp_path / "shared"), str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    calls = [int(out.split()[1]) for out, _ in outputs]
    misses = [int(out.split()[3]) for out, _ in outputs]
    assert sum(calls) == 1, outputs
    assert sum(misses) == 1
    assert all(out.split()[5] == "1" for out, _ in outputs)


def test_crashed_lock_holder_blocks_the_key_only_until_expiry(tmp_path: Path) -> None:
    engine = ToneEngine()
    svc = TTSService(make_config(tmp_path / "c", **{"cache.lock_lease": 1.0}), engine)
    try:
        key = svc.resolve(TTSRequest(text="orphaned", voice="tone-low")).key
        assert svc.singleflight.leases is not None
        token = svc.singleflight.leases.acquire(key, 1.0)  # a "process" takes the lock and dies
        assert token is not None
        expires = svc.singleflight.leases.expires_at(key)
        assert expires is not None and expires <= time.time() + 1.0  # the lease runs out by itself
        assert svc.singleflight.leases.held(key)
        started = time.time()
        result = speak(svc, "orphaned")
        assert result.cache == "MISS" and engine.calls == 1
        # The mechanism: the request waited for the lease to expire (never stole a live
        # one), and the lease, not cache.lock_timeout (600 s), ended the wait.
        assert time.time() >= expires > started
        svc.cache.flush()
        assert not svc.singleflight.leases.held(key)  # ours, released once the entry was on disk
    finally:
        svc.close()


def test_metrics_exposition(service: TTSService) -> None:
    speak(service)
    speak(service)
    service.cache.flush()  # the disk write runs on the writer thread; the gauge reads the disk tier
    text = service.dashboard.metrics.exposition().decode()
    assert 'tts_cache_requests_total{result="hit"} 1.0' in text
    assert 'tts_cache_requests_total{result="miss"} 1.0' in text
    assert "tts_engine_calls_total 1.0" in text
    assert 'tts_request_duration_seconds_bucket{le="0.001",result="hit"}' in text
    assert "tts_cache_entries 1.0" in text


def test_top_phrases(service: TTSService) -> None:
    for _ in range(3):
        speak(service, "popular")
    speak(service, "rare")
    snap = service.dashboard.snapshot(caller=LOCAL)
    assert snap["top_requested"][0]["text"] == "popular" and snap["top_requested"][0]["count"] == 3
    assert {row["text"] for row in snap["top_missed"]} == {"popular", "rare"}


def test_voice_library_round_trip(service: TTSService, engine: ToneEngine) -> None:
    saved = service.voices.save("Front Desk", (22_050, tone_prompt()), "你好", caller=LOCAL)
    assert saved["name"] == "Front Desk"
    names = [v["name"] for v in service.voices.list(caller=LOCAL)]
    assert "Front Desk" in names and "tone-low" in names
    by_name = speak(service, "welcome", voice="Front Desk")
    by_upload = speak(service, "welcome", voice=None, prompt_audio=(22_050, tone_prompt()), prompt_text="你好")
    assert by_name.key == by_upload.key and by_upload.cache == "HIT"
    assert engine.extract_calls == 1
    service.voices.delete("Front Desk", caller=LOCAL)
    with pytest.raises(NotFoundError):
        speak(service, "welcome", voice="Front Desk")
    with pytest.raises(ValidationError):
        service.voices.save("../etc/passwd", (22_050, tone_prompt()), "", caller=LOCAL)


def test_flac_round_trip_is_bit_exact() -> None:
    from lib.cache.entry import pack, unpack

    rng = np.random.default_rng(7)
    pcm = rng.integers(-32768, 32767, size=22_050 * 3, dtype=np.int16)  # noise: the hardest case for FLAC
    pcm[:100] = [-32768, 32767] * 50  # and both extremes
    entry = CachedAudio.from_pcm("f" * 32, pcm, 22_050, {"text": "x"})
    back = unpack(pack(entry), "f" * 32)
    assert np.array_equal(back.pcm, pcm) and back.sample_rate == 22_050
    assert back.wav == entry.wav


def test_full_disk_still_serves(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("mounting a small tmpfs needs root, and CI runs as root")
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    if os.system(f"mount -t tmpfs -o size=600k tmpfs '{mount}'") != 0:
        if os.environ.get("CI"):
            pytest.fail("cannot mount a tmpfs, and CI runs as root")
        pytest.skip("cannot mount a tmpfs here")
    engine = ToneEngine(seconds_per_char=0.2)
    try:
        svc = TTSService(make_config(mount / "cache", **{"cache.memory_bytes": 0}), engine)
        try:
            results = []
            for i in range(12):  # about 12 x 100 KB of FLAC into 600 KB
                results.append(speak(svc, f"full disk phrase {i:02d}"))
                svc.cache.flush()
            assert [r.cache for r in results] == ["MISS"] * 12
            assert all(r.duration > 3 for r in results)
            assert cache_errors(svc) >= 1  # the full disk was noticed and counted
            assert speak(svc, "full disk phrase 11").wav == results[-1].wav  # served, from wherever it is
            # The mechanism: the store was held below its limit, evicted, and kept the newest.
            stats = svc.cache.store.stats()
            assert stats["disk_full"] and stats["effective_limit"] < stats["size_limit"]
            assert 0 < stats["entries"] < 12 and svc.cache.store.contains(results[-1].key)
            hit = speak(svc, "full disk phrase 11")
            assert hit.cache == "HIT" and hit.info["tier"] == "disk" and engine.calls == 12
        finally:
            svc.close()
    finally:
        assert os.system(f"umount '{mount}' || umount -l '{mount}'") == 0


def test_preset_voice_requests_never_consult_the_voice_library(
    tmp_path: Path, engine: ToneEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(name: str) -> None:
        raise AssertionError(f"library read for preset {name}")

    # No templates: a template's own voice is looked up once (it may be a saved voice).
    values = {"engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False}
    service = TTSService(load_config(env={"TTS_TEMPLATES_FILE": "null"}, overrides=values), engine)
    try:
        monkeypatch.setattr(service.voices.library, "get", boom)  # a store read (or Redis trip) per request
        assert speak(service, "preset only").cache == "MISS"
        assert speak(service, "preset only").cache == "HIT"
    finally:
        service.close()


def test_verify_removes_an_orphan_file_left_by_a_killed_writer(service: TTSService, tmp_path: Path) -> None:
    speak(service, "a phrase long enough to be stored in a file of its own " * 6)
    service.cache.flush()
    stored = next((tmp_path / "cache" / "audio").rglob("*.val"))
    orphan = stored.with_name("0" * 28 + ".val")  # written, but its row was never committed
    orphan.write_bytes(b"half an entry")
    report = service.admin.verify(caller=LOCAL)
    assert not orphan.exists() and stored.exists()
    assert any("unknown file" in line for line in report["repairs"])
    assert report["corrupt_removed"] == 0
