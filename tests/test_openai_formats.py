"""Every format of ``/v1/audio/speech`` (through the real ``openai`` client, on the app
in this process) and of ``/api``, decoded by an independent decoder (the ffmpeg program) and
checked for rate and duration; ``pcm`` at 24 kHz; the same bytes in every process."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from scipy.signal import resample_poly

from lib.pipeline.service import TTSService
from tests.conftest import REPO
from tests.openai_helpers import ffdecode, ffprobe, needs_ffmpeg

TEXT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture
def service(make_service: Any) -> TTSService:
    service: TTSService = make_service(admin_token="t0ken")
    return service


@pytest.fixture
def client(http: httpx.Client, service: TTSService) -> openai.OpenAI:
    _, key = service.tenants.create("openai-formats", {})  # an unknown key would be 401 (lib.api.tenants)
    return openai.OpenAI(base_url="http://127.0.0.1/v1", api_key=key, http_client=http)


def speech(client: openai.OpenAI, fmt: str, text: str = TEXT, **extra: Any) -> Any:
    return client.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=text, response_format=fmt, **extra
    )


def opus_input_rate(data: bytes) -> int:
    """The input sample rate an Ogg Opus file declares in its OpusHead."""
    at = data.index(b"OpusHead")
    return int(struct.unpack_from("<I", data, at + 12)[0])


@needs_ffmpeg
def test_every_openai_format_decodes_at_its_rate_and_length(client: openai.OpenAI, service: TTSService) -> None:
    wav = speech(client, "wav")
    key = wav.headers["x-cache-key"]
    entry = service.cache.lookup(key)
    assert entry is not None
    seconds = entry[0].duration
    expect = {  # content type, decoded rate, samples of codec delay a decoder may keep
        "mp3": ("audio/mpeg", 22_050, 1152),
        "opus": ("audio/ogg; codecs=opus", 48_000, 0),
        "aac": ("audio/aac", 22_050, 2048),
        "flac": ("audio/flac", 22_050, 0),
        "wav": ("audio/wav", 22_050, 0),
    }
    for fmt, (mime, rate, slack) in expect.items():
        reply = speech(client, fmt)
        assert reply.headers["content-type"] == mime and reply.headers["x-cache-key"] == key, fmt
        pcm, decoded_rate = ffdecode(reply.content)
        assert decoded_rate == rate, fmt
        assert seconds - 0.001 <= pcm.size / rate <= seconds + (slack + 64) / rate, (fmt, pcm.size / rate, seconds)
        assert int(np.abs(pcm.astype(np.int32)).max()) > 1000, fmt  # sound, not silence
    opus = speech(client, "opus").content
    assert opus[:4] == b"OggS" and opus_input_rate(opus) == 24_000  # resampled to a rate Opus takes
    aac = speech(client, "aac").content
    assert ffprobe(aac)["codec"] == "aac" and b"\xff\xf1" in aac[:4096]  # ADTS frames (after the ID3 label)


def test_pcm_is_24khz_resampled_from_the_stored_entry(client: openai.OpenAI, service: TTSService) -> None:
    reply = speech(client, "pcm")
    assert reply.headers["content-type"] == "audio/pcm" and reply.headers["x-sample-rate"] == "24000"
    entry = service.cache.lookup(reply.headers["x-cache-key"])
    assert entry is not None and entry[0].sample_rate == 22_050
    # scipy's resample_poly of the entry, rounded: the reference the app's polyphase filter must equal.
    expected = np.clip(np.rint(resample_poly(entry[0].pcm.astype(np.float64), 160, 147)), -32768, 32767)
    got = np.frombuffer(reply.content, dtype="<i2")
    assert got.size == expected.size and np.array_equal(got, expected.astype(np.int16))
    assert reply.content[:4] != b"RIFF" and got.size / 24_000 == pytest.approx(entry[0].duration, abs=1e-4)


def test_api_formats_and_pcm_at_the_entry_rate(http: httpx.Client, service: TTSService) -> None:
    data = {"text": TEXT, "voice": "tone-low"}
    wav = http.post("/api/tts", data={**data, "format": "wav"})
    key = wav.headers["x-cache-key"]
    pcm = http.post("/api/tts", data={**data, "format": "pcm"})
    assert pcm.headers["content-type"] == "audio/pcm" and pcm.headers["x-sample-rate"] == "22050"
    samples, rate = sf.read(io.BytesIO(wav.content), dtype="int16")
    assert rate == 22_050 and np.frombuffer(pcm.content, "<i2").tobytes() == samples.tobytes()
    for fmt, mime in (("opus", "audio/ogg; codecs=opus"), ("aac", "audio/aac"), ("pcm", "audio/pcm")):
        posted = http.post("/api/tts", data={**data, "format": fmt})
        got = http.get(f"/api/audio/{key}.{fmt}")
        assert posted.status_code == got.status_code == 200 and got.headers["content-type"] == mime, fmt
        assert got.content == posted.content and got.headers["etag"] == f'"{key}.{fmt}"', fmt
        again = http.get(f"/api/audio/{key}.{fmt}", headers={"If-None-Match": got.headers["etag"]})
        assert again.status_code == 304, fmt
    assert http.get(f"/api/audio/{key}.pcm").headers["x-sample-rate"] == "22050"
    assert http.get(f"/api/audio/{key}.m4a").status_code == 400


_ENCODE_ALL = """
import hashlib, json, sys
import numpy as np
from lib.cache.entry import CachedAudio
t = np.arange(22050 * 3) / 22050
pcm = (8000 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.int16)
meta = {"created": 1.8e9, "engine": "tone", "model_version": "tone-1", "tag": "tone:tone-1", "provider": "ACME"}
entry = CachedAudio.from_pcm("0123456789abcdef0123456789abcdef", pcm, 22050, meta)
fmts = ["wav", "pcm", "pcm24k", "flac", "mp3", "ogg", "opus", "aac"]
print(json.dumps({f: hashlib.md5(entry.encoded(f)).hexdigest() for f in fmts}))
"""


@pytest.mark.slow
def test_every_encoding_is_the_same_bytes_in_every_process() -> None:
    """A strong ETag names one key in one format: its bytes must not depend on the
    process (libsndfile's Ogg writer draws a random stream serial: replaced)."""
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", _ENCODE_ALL], cwd=REPO, capture_output=True,
                                  check=True, text=True).stdout)
        for _ in range(2)
    ]  # fmt: skip
    assert runs[0] == runs[1] and len(runs[0]) == 8
    assert len(set(runs[0].values())) == 8


def test_ogg_vorbis_has_a_fixed_serial_number(client: openai.OpenAI) -> None:
    ogg = speech(client, "ogg").content
    serials = {struct.unpack_from("<I", ogg, at + 14)[0] for at in range(len(ogg)) if ogg[at : at + 4] == b"OggS"}
    assert serials == {0x54545341}
