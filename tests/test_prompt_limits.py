"""Prompt audio is checked on its header before anything is decoded or allocated
(lib/audio/pcm.py), and no prompt a client sends yields a 5xx: hostile WAV and FLAC headers
built by hand and by hypothesis, against the service and against the live HTTP API."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.api import create_app
from lib.audio.pcm import PromptDecoder, PromptLimits
from lib.config import load_config
from lib.engines.base import VoiceProfile
from lib.engines.tone import ToneEngine
from lib.errors import NotAudioError, PayloadTooLargeError, PromptAudioError, TTSError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest

UPLOAD_LIMIT = 6_000_000


# -- hostile files, built byte by byte -------------------------------------------------------


def riff(
    rate: int, *, channels: int = 1, bits: int = 16, fmt: int = 1, payload: bytes | None = None,
    frames: int = 1000, data_len: int | None = None, truncate: int | None = None,
) -> bytes:  # fmt: skip
    """A WAV file whose header says what it is told to say, true or not."""
    align = channels * bits // 8
    if payload is None:  # the samples the header promises, up to 256 KB (a lie beyond that)
        rng = np.random.default_rng(frames)
        payload = rng.integers(0, 256, min(frames * max(align, 1), 256_000), dtype=np.uint8).tobytes()
    size = len(payload) if data_len is None else data_len
    head = struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", (36 + size) & 0xFFFFFFFF, b"WAVE", b"fmt ", 16, fmt & 0xFFFF,
        channels & 0xFFFF, rate & 0xFFFFFFFF, (rate * align) & 0xFFFFFFFF, align & 0xFFFF, bits & 0xFFFF,
        b"data", size & 0xFFFFFFFF,
    )  # fmt: skip
    blob = head + payload
    return blob if truncate is None else blob[: 44 + truncate]


def speech_like(seconds: float = 2.0, rate: int = 16_000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)


def flac(*, rate: int | None = None, channels: int | None = None, total: int | None = None,
         truncate: int | None = None) -> bytes:  # fmt: skip
    """A real FLAC file whose STREAMINFO is then rewritten (rate 20 bits, channels 3,
    total samples 36 bits)."""
    buf = io.BytesIO()
    sf.write(buf, speech_like(), 16_000, format="FLAC", subtype="PCM_16")
    blob = bytearray(buf.getvalue())
    v = int.from_bytes(blob[18:26], "big")
    r, c, b, n = (v >> 44) & 0xFFFFF, ((v >> 41) & 7) + 1, (v >> 36) & 31, v & ((1 << 36) - 1)
    r = r if rate is None else rate
    c = c if channels is None else channels
    n = n if total is None else total
    blob[18:26] = ((r << 44) | ((c - 1) << 41) | (b << 36) | n).to_bytes(8, "big")
    out = bytes(blob)
    return out if truncate is None else out[:truncate]


FOUR_MB = bytes(np.random.default_rng(7).integers(0, 256, 4_000_000, dtype=np.uint8))


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    overrides = {"engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False,
                 "prompt.max_upload_bytes": UPLOAD_LIMIT}  # fmt: skip
    svc = TTSService(load_config(env={}, overrides=overrides), ToneEngine(), admin_token="t")
    yield svc
    svc.close()


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the sample blocks libsndfile decodes (the header is read without it)."""
    calls: list[int] = []
    real = sf.SoundFile.read

    def counted(self: sf.SoundFile, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(sf.SoundFile, "read", counted)
    return calls


def ask(service: TTSService, audio: bytes, **fields: Any) -> TTSError | None:
    try:
        service.synthesise(TTSRequest(text="hello", prompt_audio=audio, **fields))
    except TTSError as exc:
        return exc
    return None


# -- the limits, before decoding ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("audio", "error", "says"),
    [
        (riff(1, payload=FOUR_MB), PromptAudioError, "8 kHz to 192 kHz"),
        (riff(7, payload=FOUR_MB), PromptAudioError, "8 kHz to 192 kHz"),
        (riff(2_147_483_647, payload=FOUR_MB), PromptAudioError, "8 kHz to 192 kHz"),
        (riff(1, bits=8, payload=FOUR_MB), PromptAudioError, "8 kHz to 192 kHz"),
        (riff(7_999), PromptAudioError, "7999 Hz"),
        (riff(192_001), PromptAudioError, "192001 Hz"),
        (riff(16_000, channels=300, frames=2), PromptAudioError, "at most 8"),
        (riff(8_000, payload=FOUR_MB), PromptAudioError, "prompt.max_seconds"),  # 250 s at 8 kHz
        (flac(total=(1 << 36) - 1), PromptAudioError, "prompt.max_seconds"),
        (flac(rate=1), PromptAudioError, "1 Hz"),
        (flac(rate=7, total=(1 << 36) - 1), PromptAudioError, "8 kHz to 192 kHz"),
        (riff(16_000, payload=bytes(UPLOAD_LIMIT + 1)), PayloadTooLargeError, "prompt.max_upload_bytes"),
    ],
    ids=["1Hz-4MB", "7Hz-4MB", "2^31Hz", "8bit-1Hz", "7999Hz", "192001Hz", "300ch", "250s", "flac-2^36-frames",
         "flac-1Hz", "flac-7Hz-2^36", "over-upload-limit"],
)  # fmt: skip
def test_a_lying_or_oversized_header_is_refused_before_any_decode(
    service: TTSService, decoded: list[int], audio: bytes, error: type[TTSError], says: str
) -> None:
    refused = ask(service, audio)
    assert isinstance(refused, error), refused
    assert 400 <= refused.http_status < 500 and says in str(refused)
    assert decoded == []  # not one sample block was decoded
    assert len(service.voices.decoder) == 0 and service.engine.extract_calls == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "audio",
    [riff(16_000, channels=0), riff(16_000, data_len=0xFFFFFFFF, frames=100), riff(16_000, truncate=7),
     riff(16_000, bits=0), riff(16_000, fmt=2), flac(truncate=2000), flac(total=0), b"RIFF", b""],
    ids=["0ch", "data-len-lies", "truncated", "0bit", "adpcm-bad", "flac-truncated", "flac-unknown-length",
         "riff-only", "empty"],
)  # fmt: skip
def test_broken_files_are_4xx(service: TTSService, audio: bytes) -> None:
    refused = ask(service, audio)
    assert isinstance(refused, TTSError) and 400 <= refused.http_status < 500, refused


def test_an_odd_but_valid_rate_is_accepted_without_a_huge_filter(service: TTSService) -> None:
    buf = io.BytesIO()
    sf.write(buf, speech_like(3.0, 191_999), 191_999, format="WAV", subtype="PCM_16")
    prompt = service.voices.decoder.decode(buf.getvalue())
    assert abs(prompt.pcm.size - 3 * 16_000) <= 2  # resampled with a ratio within 0.01 %


def test_usual_rates_keep_exact_fingerprints(service: TTSService) -> None:
    # 44.1 kHz goes through the exact 160/441 ratio: WAV and FLAC of one recording agree.
    audio = (speech_like(2.0, 44_100) * 32767).astype(np.int16)
    as_wav, as_flac = io.BytesIO(), io.BytesIO()
    sf.write(as_wav, audio, 44_100, format="WAV", subtype="PCM_16")
    sf.write(as_flac, audio, 44_100, format="FLAC", subtype="PCM_16")
    one, two = service.voices.decoder.decode(as_wav.getvalue()), service.voices.decoder.decode(as_flac.getvalue())
    assert one.fingerprint == two.fingerprint and one.pcm.size == 32_000


# -- the memo keeps only accepted prompts, bounded in bytes -----------------------------------------


class RefusingEngine(ToneEngine):
    """Refuses every prompt when extracting the voice (as a real engine refuses a tone)."""

    def extract_voice(self, prompt_pcm: Any, prompt_text: str) -> VoiceProfile:
        raise PromptAudioError("prompt audio is not speech")


def test_only_accepted_prompts_are_memoised(service: TTSService) -> None:
    buf = io.BytesIO()
    sf.write(buf, speech_like(2.0), 16_000, format="WAV")
    good = buf.getvalue()
    for bad in (riff(1, payload=FOUR_MB), riff(16_000, frames=100), riff(16_000, payload=bytes(64_000))):
        assert isinstance(ask(service, bad), PromptAudioError)  # bad rate, too short, silent
    assert len(service.voices.decoder) == 0
    assert ask(service, good) is None
    # Its PCM (2 s at 16 kHz) and the upload's own bytes, which a lookup compares.
    assert len(service.voices.decoder) == 1 and service.voices.decoder.nbytes == 64_000 + len(good)


def test_a_prompt_the_engine_refuses_is_forgotten(tmp_path: Path) -> None:
    config = load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path), "voices.prewarm": False})
    svc = TTSService(config, RefusingEngine())
    try:
        buf = io.BytesIO()
        sf.write(buf, speech_like(2.0), 16_000, format="WAV")
        refused = ask(svc, buf.getvalue())
        assert isinstance(refused, PromptAudioError) and refused.http_status == 422
        assert len(svc.voices.decoder) == 0
        with pytest.raises(PromptAudioError):
            svc.voices.save("desk", buf.getvalue(), caller=LOCAL)
        assert len(svc.voices.decoder) == 0 and svc.voices.library.get("desk") is None
    finally:
        svc.close()


def test_an_upload_is_found_again_by_its_bytes_alone_never_by_a_look_alike() -> None:
    decoder = PromptDecoder(PromptLimits())
    buf = io.BytesIO()
    sf.write(buf, speech_like(3.0), 16_000, format="WAV", subtype="PCM_16")
    upload = buf.getvalue()
    assert decoder.remembered(upload) is None  # never decoded: nothing to find
    prompt = decoder.decode(upload)
    assert decoder.remembered(bytes(bytearray(upload))) is prompt  # the same bytes (another object)
    # One sample changed where the memo key does not look: its key, but another recording.
    pcm_at = len(upload) // 2 + 1
    changed = upload[:pcm_at] + bytes([upload[pcm_at] ^ 0x01]) + upload[pcm_at + 1 :]
    assert decoder.remembered(changed) is None
    other = decoder.decode(changed)
    assert other.fingerprint != prompt.fingerprint
    assert decoder.remembered(changed) is other
    decoder.clear()
    assert decoder.remembered(upload) is None


def test_the_memo_is_bounded_in_bytes() -> None:
    decoder = PromptDecoder(PromptLimits(), memory_bytes=200_000)  # three 2 s prompts (64 KB each)
    for i in range(10):
        decoder.decode((16_000, speech_like(2.0) * (0.5 + i / 20)))
    assert decoder.nbytes <= 200_000 and len(decoder) == 3
    decoder.clear()
    assert (len(decoder), decoder.nbytes) == (0, 0)


def test_limits_are_those_of_the_configuration(tmp_path: Path) -> None:
    overrides = {"engine": "tone", "cache.dir": str(tmp_path), "voices.prewarm": False, "prompt.max_seconds": 3.0,
                 "prompt.max_upload_bytes": 100_000, "prompt.memory_bytes": 1000}  # fmt: skip
    svc = TTSService(load_config(env={}, overrides=overrides), ToneEngine())
    try:
        limits = svc.voices.decoder.limits
        assert (limits.max_seconds, limits.max_bytes, svc.voices.decoder.memory_bytes) == (3.0, 100_000, 1000)
        buf = io.BytesIO()
        sf.write(buf, speech_like(3.5, 8000), 8000, format="WAV", subtype="PCM_16")
        with pytest.raises(PromptAudioError, match=r"at most 3 s \(prompt.max_seconds\)"):
            svc.voices.decoder.decode(buf.getvalue())
        with pytest.raises(PayloadTooLargeError):
            svc.voices.decoder.decode(bytes(100_001))
        with pytest.raises(NotAudioError):
            svc.voices.decoder.decode(bytes(1000))
    finally:
        svc.close()


# -- property: whatever the header says, never a 5xx ------------------------------------------------

RATES = st.one_of(
    st.sampled_from([0, 1, 7, 7_999, 8_000, 11_025, 16_000, 44_100, 192_000, 192_001, 2**31 - 1, 2**32 - 1]),
    st.integers(0, 2**32 - 1),
)
WAVS = st.builds(
    riff,
    RATES,
    channels=st.one_of(st.sampled_from([0, 1, 2, 8, 9, 255, 65_535]), st.integers(0, 65_535)),
    bits=st.sampled_from([0, 1, 7, 8, 12, 16, 24, 32, 64, 65_535]),
    fmt=st.sampled_from([0, 1, 2, 3, 6, 7, 0x55, 0xFFFE]),
    frames=st.integers(0, 3000),
    data_len=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    truncate=st.one_of(st.none(), st.integers(0, 400)),
)
FLACS = st.builds(
    flac,
    rate=st.one_of(st.none(), st.integers(0, 2**20 - 1)),
    channels=st.one_of(st.none(), st.integers(1, 8)),
    total=st.one_of(st.none(), st.sampled_from([0, 1, 16_000, (1 << 36) - 1]), st.integers(0, (1 << 36) - 1)),
    truncate=st.one_of(st.none(), st.integers(0, 5000)),
)
HOSTILE = st.one_of(WAVS, FLACS, st.binary(max_size=300))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(audio=HOSTILE, store=st.booleans())
def test_no_prompt_yields_a_server_error_in_the_service(service: TTSService, audio: bytes, store: bool) -> None:
    try:
        service.synthesise(TTSRequest(text="hello", prompt_audio=audio, store=store))
    except TTSError as exc:
        assert 400 <= exc.http_status < 500, f"{exc.http_status}: {exc}"
    try:
        service.voices.save("hostile", audio, caller=LOCAL)
    except TTSError as exc:
        assert exc.http_status < 500, f"{exc.http_status}: {exc}"
    else:
        service.voices.delete("hostile", caller=LOCAL)


@pytest.fixture
def live(service: TTSService) -> Iterator[httpx.Client]:
    with in_process(create_app(service)) as c:
        yield c


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(audio=HOSTILE)
def test_no_prompt_yields_a_server_error_over_http(live: httpx.Client, audio: bytes) -> None:
    upload = {"prompt_audio": ("p.wav", audio, "audio/wav")}
    tts = live.post("/api/tts", data={"text": "hello"}, files=upload)
    assert tts.status_code < 500, tts.text
    assert tts.status_code == 200 or "error" in tts.json()
    voice = live.post("/api/voices", data={"name": "hostile", "replace": "true"}, files=upload,
                      headers={"Authorization": "Bearer t"})  # fmt: skip
    assert voice.status_code < 500, voice.text


def test_the_pinned_lies_over_http(live: httpx.Client) -> None:
    for audio, status in ((riff(1, payload=FOUR_MB), 422), (riff(7, payload=FOUR_MB), 422),
                          (flac(total=(1 << 36) - 1), 422), (riff(16_000, channels=0), 415)):  # fmt: skip
        r = live.post("/api/tts", data={"text": "hello"}, files={"prompt_audio": ("p.wav", audio, "audio/wav")})
        assert r.status_code == status, r.text


def test_one_status_per_bad_audio_class_on_every_entry_point(live: httpx.Client) -> None:
    """The same bad file gets the same answer from every endpoint that takes audio; a
    stated rate outside 8-192 kHz is 422 whether or not libsndfile can open it (0 Hz
    and 2^31 Hz and up it cannot: they were 415, "not decodable", while 2^31-1 was 422)."""
    silent = io.BytesIO()
    sf.write(silent, np.zeros(32_000, np.float32), 16_000, format="WAV", subtype="PCM_16")
    classes = {
        "0Hz": (riff(0), 422, "0 Hz"),
        "2^31Hz": (riff(2**31), 422, "2147483648 Hz"),
        "2^32-1Hz": (riff(2**32 - 1), 422, "4294967295 Hz"),
        "2^31-1Hz": (riff(2**31 - 1), 422, "2147483647 Hz"),
        "1Hz": (riff(1), 422, "1 Hz"),
        "not-audio": (b"RIFF....WAVEfmt nonsense" * 20, 415, "not decodable"),
        "0ch": (riff(16_000, channels=0), 415, "not decodable"),
        "silent": (silent.getvalue(), 422, "silent"),
        "empty": (b"", 400, "empty"),
        "too-large": (riff(16_000, payload=bytes(UPLOAD_LIMIT + 1)), 413, "prompt.max_upload_bytes"),
    }
    admin = {"Authorization": "Bearer t"}
    for name, (audio, status, says) in classes.items():
        answers = {
            "POST /api/tts": live.post("/api/tts", data={"text": "hello"}, files={"prompt_audio": ("p.wav", audio)}),
            "POST /api/voices": live.post(
                "/api/voices", data={"name": "bad", "replace": "true"}, files={"prompt_audio": ("p.wav", audio)},
                headers=admin,
            ),
            "POST /api/convert": live.post(
                "/api/convert", data={"voice": "tone-low"}, files={"source_audio": ("p.wav", audio)}
            ),
        }  # fmt: skip
        for entry, answer in answers.items():
            assert answer.status_code == status, (name, entry, answer.text)
            assert says in answer.json()["error"], (name, entry, answer.text)
