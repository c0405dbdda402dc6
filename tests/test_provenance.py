"""Provenance labels: every served file says it is AI-generated, who provides it, its
content id (the key), the model and the date, read back by independent readers (mutagen
and ffprobe); the audio decodes the same with and without them; never part of a key."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mutagen
import numpy as np
import pytest
import soundfile as sf
from conftest import in_process

from lib.api import create_app
from lib.audio.encoders import wav_data_offset
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest
from tests.conftest import tone_service
from tests.openai_helpers import ffdecode, ffprobe, needs_ffmpeg

PROVIDER = "ACME 语音 Ltd"
TEXT = "Your table is ready, please follow me."
FORMATS = ("wav", "mp3", "flac", "ogg", "opus", "aac")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = tone_service(tmp_path, **{"provenance.provider": PROVIDER})
    yield svc
    svc.close()


def fetch(service: TTSService, fmt: str, text: str = TEXT) -> tuple[bytes, str]:
    with in_process(create_app(service)) as http:
        reply = http.post("/api/tts", data={"text": text, "voice": "tone-low", "format": fmt})
        assert reply.status_code == 200, reply.text
        return reply.content, reply.headers["x-cache-key"]


def mutagen_tags(data: bytes) -> dict[str, str]:
    """The tags as mutagen reads them, by upper-case name (ID3 TXXX by description)."""
    found = mutagen.File(io.BytesIO(data))
    assert found is not None and found.tags is not None
    tags: dict[str, str] = {}
    for name, value in found.tags.items():
        frame = value if not isinstance(value, list) else value[0]
        text = getattr(frame, "text", frame)
        tags[str(getattr(frame, "desc", "") or name).split(":")[0].upper()] = str(
            text[0] if isinstance(text, list) else text
        )
    return tags


def check_label(tags: dict[str, str], key: str, engine_tag: str) -> None:
    record = json.loads(tags["AIGC"])
    assert record["Label"] == "1" and record["ContentProducer"] == PROVIDER and record["ProduceID"] == key
    comment = tags.get("COMMENT") or tags.get("COMM") or tags.get("ICMT", "")
    assert "AI-generated" in comment and key in comment and engine_tag in comment and PROVIDER in comment
    assert time.strftime("%Y-%m-%d", time.gmtime()) in comment


@needs_ffmpeg
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_container_carries_the_label_in_its_own_way(service: TTSService, fmt: str) -> None:
    data, key = fetch(service, fmt)
    probed = ffprobe(data)
    check_label(probed["tags"], key, service.tag)
    if fmt in ("mp3", "flac", "ogg", "opus"):  # mutagen reads these (not RIFF INFO, not ADTS)
        tags = mutagen_tags(data)
        check_label(tags, key, service.tag)
    if fmt in ("flac", "ogg", "opus"):  # Vorbis comments, named
        assert probed["tags"]["ORGANIZATION"] == PROVIDER and probed["tags"]["CONTENT_ID"] == key
        assert probed["tags"]["MODEL"] == service.tag
    if fmt in ("mp3", "aac"):
        assert data[:3] == b"ID3" and probed["tags"]["ENCODED_BY"] == PROVIDER
    if fmt == "wav":
        assert data[36:40] == b"LIST" and data[44:48] == b"INFO" and probed["tags"]["ENCODED_BY"] == PROVIDER


@needs_ffmpeg
@pytest.mark.parametrize("fmt", FORMATS)
def test_labels_leave_the_audio_as_it_was(tmp_path: Path, service: TTSService, fmt: str) -> None:
    labelled, key = fetch(service, fmt)
    plain_service = tone_service(tmp_path / "plain", **{"provenance.labels": False})
    try:
        plain, plain_key = fetch(plain_service, fmt)
    finally:
        plain_service.close()
    assert plain_key == key  # part of no key
    assert "AIGC" not in ffprobe(plain)["tags"] and b"AIGC" not in plain and b"AIGC" in labelled
    a, rate_a = ffdecode(labelled)
    b, rate_b = ffdecode(plain)
    assert rate_a == rate_b and np.array_equal(a, b)  # the same samples, the same length


def test_a_memory_hit_sends_the_labelled_wav_built_once(service: TTSService) -> None:
    request = TTSRequest(text=TEXT, voice="tone-low")
    made = service.synthesise(request)
    hit = service.memory_hit(request)
    assert hit is not None and hit.audio is made.audio
    ready = service.cache.ready_bytes(made.key, "wav")
    assert ready is made.audio.wav  # the very bytes object: nothing built per hit
    assert b"LIST" in ready[: made.audio.offset] and made.key.encode() in ready[: made.audio.offset]
    samples, rate = sf.read(io.BytesIO(ready), dtype="int16")
    assert rate == 22_050 and samples.tobytes() == ready[wav_data_offset(ready) :]


def test_entries_from_disk_follow_the_configured_provider(tmp_path: Path) -> None:
    first = tone_service(tmp_path, **{"provenance.provider": "Old Name"})
    try:
        key = first.synthesise(TTSRequest(text=TEXT, voice="tone-low")).key
        first.cache.flush()
    finally:
        first.close()
    renamed = tone_service(tmp_path, **{"provenance.provider": "New Name"})
    try:
        found = renamed.cache.lookup(key)
        assert found is not None and found[1] == "disk"
        assert b"New Name" in found[0].wav and b"Old Name" not in found[0].wav
        assert b"New Name" in renamed.cache.audio_bytes(found[0], "flac")
    finally:
        renamed.close()
    unlabelled = tone_service(tmp_path, **{"provenance.labels": False})
    try:
        found = unlabelled.cache.lookup(key)
        assert found is not None and b"LIST" not in found[0].wav[:100] and found[0].label is None
    finally:
        unlabelled.close()


def test_a_streamed_answer_is_labelled_too(service: TTSService) -> None:
    with in_process(create_app(service)) as http:
        for fmt, head in (("wav", b"RIFF"), ("mp3", b"ID3")):
            data = {"text": f"{TEXT} {fmt}", "voice": "tone-low", "format": fmt, "stream": "true"}
            reply = http.post("/api/tts", data=data)
            key = reply.headers["x-cache-key"].encode()
            assert reply.content[:3] == head[:3] and key in reply.content[:1200] and b"AIGC" in reply.content[:1200]
        pcm = http.post("/api/tts", data={"text": TEXT, "voice": "tone-low", "format": "pcm", "stream": "true"})
        assert b"AIGC" not in pcm.content  # raw samples: no container, no label


def test_the_label_is_valid_riff(service: TTSService) -> None:
    wav = service.synthesise(TTSRequest(text=TEXT, voice="tone-low")).wav
    chunks: dict[bytes, Any] = {}
    at = 12
    while at < len(wav):
        cid, size = wav[at : at + 4], int.from_bytes(wav[at + 4 : at + 8], "little")
        chunks[cid] = size
        at += 8 + size + (size & 1)
    assert at == len(wav) and list(chunks) == [b"fmt ", b"LIST", b"data"]
    assert int.from_bytes(wav[4:8], "little") == len(wav) - 8
