"""``POST /api/tts`` with ``stream=true`` through a real server on a loopback port: audio
arrives while later sentences are still being made, what is streamed is what is cached,
and work nobody waits for is dropped: a client that goes away (streamed or not, here or on
``/v1``) stops the sentences not yet started, unless another request waits for them.

The engine is the tone engine behind a gate the test opens one synthesis at a time, so
the order of events is asserted, never the wall clock."""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache
import httpx
import numpy as np
import pytest

from lib.api import create_app
from lib.audio.encoders import wav_data_offset
from lib.compose.segments import split
from lib.config import load_config
from lib.core.waiting import Caller, waited_by
from lib.engines.tone import ToneEngine
from lib.errors import AbandonedError
from lib.pipeline.service import TTSService
from lib.pipeline.streaming import Segment, open_wav_header
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from tests.api_server import LiveServer
from tests.conftest import hold_write_lock, wait_until
from tests.server_process import ServerProcess

PARAGRAPH = "第一句话说的是天气。第二句话说的是交通。第三句话说的是时间。第四句话说的是地点。"
SIX = PARAGRAPH + "第五句话说的是人物。第六句话说的是事情。"
HEADER = 44
#: Where the samples of a streamed WAV begin: after its open-sized data chunk header.
OPEN_DATA = b"data\xff\xff\xff\xff"


def pcm_of(wav: bytes) -> bytes:
    """The samples of a whole WAV file (after its provenance label)."""
    return wav[wav_data_offset(wav) :]


def read_header(chunks: Iterator[bytes], body: bytearray) -> int:
    """Read a streamed WAV up to its samples; their offset."""
    while OPEN_DATA not in body:
        body.extend(next(chunks))
    return body.index(OPEN_DATA) + len(OPEN_DATA)


class GatedTone(ToneEngine):
    """The tone engine, where each synthesis waits until the test lets one through."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Semaphore(0)
        self.finished = 0

    def synthesise(self, text: str, *args: Any, **kwargs: Any) -> Any:
        if not self.gate.acquire(timeout=30):
            raise RuntimeError("the test never opened the gate")
        out = super().synthesise(text, *args, **kwargs)
        self.finished += 1
        return out

    def let(self, n: int = 1) -> None:
        for _ in range(n):
            self.gate.release()


@pytest.fixture
def engine() -> GatedTone:
    return GatedTone()


@pytest.fixture
def service(tmp_path: Path, engine: GatedTone) -> Iterator[TTSService]:
    config = load_config(
        env={"TTS_TEMPLATES_FILE": "null"},
        overrides={"engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False},
    )
    svc = TTSService(config, engine)
    yield svc
    engine.let(100)
    svc.close()


@pytest.fixture
def server(service: TTSService) -> Iterator[LiveServer]:
    with LiveServer(create_app(service)) as live:
        yield live


def form(text: str = PARAGRAPH, **fields: Any) -> dict[str, str]:
    data = {"voice": "tone-low", "text": text, "stream": "true"}
    data.update({k: str(v) for k, v in fields.items()})
    return data


def mp3_length(data: bytes) -> tuple[int, int]:
    """(samples, rate) by walking the MP3 frame headers (Layer III). libsndfile is no
    judge here: without the Xing header a complete file has, it guesses the length."""
    rates = {3: (44_100, 48_000, 32_000), 2: (22_050, 24_000, 16_000), 0: (11_025, 12_000, 8_000)}
    kbps = {3: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
            2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)}  # fmt: skip
    at = samples = rate = 0
    if data[:3] == b"ID3":  # the provenance label: a tag of 10 bytes plus its syncsafe size
        at = 10 + sum((b & 0x7F) << (7 * (3 - i)) for i, b in enumerate(data[6:10]))
    while at + 4 <= len(data):
        assert data[at] == 0xFF and data[at + 1] & 0xE0 == 0xE0, f"no frame at byte {at}"
        version, bitrate, rate_index = (data[at + 1] >> 3) & 3, data[at + 2] >> 4, (data[at + 2] >> 2) & 3
        rate = rates[version][rate_index]
        per_frame = 1152 if version == 3 else 576
        size = (per_frame // 8) * kbps[3 if version == 3 else 2][bitrate] * 1000 // rate + ((data[at + 2] >> 1) & 1)
        samples += per_frame
        at += size
    return samples, rate


def read_until(chunks: Iterator[bytes], buffer: bytearray, size: int) -> None:
    while len(buffer) < size:
        buffer.extend(next(chunks))


def cancelled(service: TTSService) -> float:
    """``tts_segments_cancelled_total{reason="disconnected"}``."""
    value = service.dashboard.metrics.registry.get_sample_value(
        "tts_segments_cancelled_total", {"reason": "disconnected"}
    )
    return value or 0.0


def hang_up_after(
    server: LiveServer, path: str, body: bytes, content_type: str, ready: Any, accept: str = "*/*"
) -> None:
    """POST ``body`` on a socket of its own, wait until ``ready()``, then close the
    socket without reading the answer: a client that hung up."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nAccept: {accept}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall(head.encode() + body)
        assert wait_until(ready)


def in_engine(service: TTSService, n: int = 1) -> Any:
    return lambda: service.watchdog.health()["calls_in_flight"] == n


def test_the_first_sentence_plays_before_the_second_exists(
    server: LiveServer, service: TTSService, engine: GatedTone
) -> None:
    key = service.resolve(TTSRequest(text=PARAGRAPH, voice="tone-low")).key
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        client.stream("POST", "/api/tts", data=form()) as response,
    ):
        assert response.status_code == 200 and response.headers["x-cache"] == "MISS"
        assert response.headers["x-cache-key"] == key and response.headers["content-type"] == "audio/wav"
        chunks = response.iter_raw()
        body = bytearray()
        start = read_header(chunks, body)
        assert bytes(body[:36]) == open_wav_header(22_050)[:36]  # sizes unknown: 0xFFFFFFFF
        assert b"LIST" in body[:start] and key.encode() in body[:start]  # labelled, as a whole file is
        engine.let(1)
        read_until(chunks, body, start + 2)
        # Audio of sentence 1 is here; sentence 2 has not been made, nothing is stored whole.
        assert engine.finished == 1 and service.cache.lookup(key) is None
        engine.let(3)
        for chunk in chunks:
            body.extend(chunk)
    assert engine.finished == 4
    service.cache.flush()
    stored = service.cache.lookup(key)
    assert stored is not None
    assert bytes(body[start:]) == pcm_of(stored[0].wav)  # what was streamed is what was stored
    with httpx.Client(base_url=server.url, timeout=30) as client:
        again = client.post("/api/tts", data=form())
    assert again.headers["x-cache"] == "HIT" and pcm_of(again.content) == pcm_of(stored[0].wav)
    assert engine.calls == 4
    metrics = service.dashboard.metrics.exposition().decode()
    assert 'tts_first_audio_seconds_count{result="miss"} 1.0' in metrics
    assert 'tts_first_audio_seconds_count{result="hit"} 1.0' in metrics


def test_a_streaming_client_that_leaves_stops_the_sentences_not_yet_started(
    server: LiveServer, service: TTSService, engine: GatedTone, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lib.api.attended")
    key = service.resolve(TTSRequest(text=SIX, voice="tone-low")).key
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        client.stream("POST", "/api/tts", data=form(SIX)) as response,
    ):
        chunks = response.iter_raw()
        body = bytearray()
        engine.let(1)
        read_until(chunks, body, read_header(chunks, body) + 2)
        # The first sentence was heard; the second is in the engine (held at the gate).
        assert wait_until(lambda: service.watchdog.health()["calls_in_flight"] == 1)
    # The connection is closed here, with five sentences still to make.
    assert wait_until(lambda: "client disconnected" in caplog.text)
    engine.let(1)  # the sentence inside the engine ends, and is stored
    assert wait_until(lambda: cancelled(service) == 4)  # the other four never reach the engine
    service.settle(30)
    assert engine.finished == 2 and engine.calls == 2
    assert service.watchdog.health()["calls_in_flight"] == 0
    service.cache.flush()
    assert service.cache.lookup(key) is None  # nothing half-made is stored as the whole
    engine.let(4)
    again = service.synthesise(TTSRequest(text=SIX, voice="tone-low"))
    assert again.info["segments_reused"] == 2 and engine.calls == 2 + 4  # the two made were stored


def test_pcm_and_mp3_stream_and_the_rest_are_refused(server: LiveServer, engine: GatedTone) -> None:
    engine.let(100)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        pcm = client.post("/api/tts", data=form(format="pcm"))
        wav = client.post("/api/tts", data=form())
        mp3 = client.post("/api/tts", data=form(format="mp3", seed=1))
        flac = client.post("/api/tts", data=form(format="flac"))
        hit_pcm = client.post("/api/tts", data=form(format="pcm", stream="false"))
    assert pcm.headers["content-type"] == "audio/pcm" and pcm.headers["x-sample-rate"] == "22050"
    assert pcm.content == pcm_of(wav.content) == hit_pcm.content
    assert mp3.content[:3] == b"ID3" and mp3.headers["x-cache-key"].encode() in mp3.content[:1000]
    samples, rate = mp3_length(mp3.content)
    assert rate == 22_050 and samples >= len(pcm.content) / 2  # every sample is in the stream's frames
    assert flac.status_code == 400 and "wav, pcm or mp3" in flac.json()["error"]


def test_an_engine_failure_ends_the_stream_early_and_caches_no_whole(
    server: LiveServer, service: TTSService, engine: GatedTone
) -> None:
    engine.let(1)
    real = ToneEngine.synthesise

    def failing_second(self: ToneEngine, text: str, *args: Any, **kwargs: Any) -> Any:
        if text.startswith("第二"):
            raise RuntimeError("boom")
        return real(self, text, *args, **kwargs)

    engine.let(5)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ToneEngine, "synthesise", failing_second)
        with (
            httpx.Client(base_url=server.url, timeout=30) as client,
            pytest.raises(httpx.HTTPError),
            client.stream("POST", "/api/tts", data=form()) as response,
        ):
            body = b"".join(response.iter_raw())
            assert len(body) > HEADER  # the first sentence came, then the stream broke off
    service.settle(30)
    service.cache.flush()
    key = service.resolve(TTSRequest(text=PARAGRAPH, voice="tone-low")).key
    assert service.cache.lookup(key) is None
    assert service.dashboard.snapshot(caller=LOCAL)["since_start"]["errors"] == 1


def test_service_stream_yields_the_cached_whole_for_a_hit(service: TTSService, engine: GatedTone) -> None:
    engine.let(4)
    made = service.synthesise(TTSRequest(text=PARAGRAPH, voice="tone-low"))
    answer = service.stream(TTSRequest(text=PARAGRAPH, voice="tone-low"))
    assert answer.cache == "HIT"
    assert np.array_equal(np.concatenate(list(answer.chunks)), made.audio.pcm)


def test_service_stream_marks_each_sentence_made_or_cached_before_its_audio(
    service: TTSService, engine: GatedTone
) -> None:
    """The live player's progress and decision (lib.ui.playback): each segment of a miss
    is marked in the stream right before its audio, ``done`` of ``total``, and whether
    the engine made it now (two sentences cached by an earlier text, two new); the
    chunks alone, as ``chunks`` yields them, are the whole."""
    engine.let(6)
    service.synthesise(TTSRequest(text="第一句话说的是天气。第二句话说的是交通。", voice="tone-low"))
    answer = service.stream(TTSRequest(text=PARAGRAPH, voice="tone-low"))
    assert answer.cache == "MISS"
    events = list(answer.events())
    marks = [e for e in events if isinstance(e, Segment)]
    assert marks == [Segment(1, 4, False), Segment(2, 4, False), Segment(3, 4, True), Segment(4, 4, True)]
    after = [events[i + 1] for i, e in enumerate(events) if isinstance(e, Segment)]
    assert all(isinstance(e, np.ndarray) and e.size for e in after)  # its audio follows
    pcm = [e for e in events if not isinstance(e, Segment)]
    assert np.array_equal(np.concatenate(pcm), answer.result(30).audio.pcm)


# -- work nobody waits for -------------------------------------------------------------


@pytest.mark.parametrize("accept", ["*/*", "application/json"])  # the fast path's miss; the endpoint's
def test_a_client_that_hangs_up_stops_the_sentences_not_yet_started(
    server: LiveServer, service: TTSService, engine: GatedTone, caplog: pytest.LogCaptureFixture, accept: str
) -> None:
    """A non-streamed ``POST /api/tts`` of six sentences whose client closes the
    connection while the first is in the engine: the first ends and is stored, the other
    five are never sent to the engine, and ``tts_segments_cancelled_total`` counts them."""
    caplog.set_level(logging.INFO, logger="lib.api.attended")
    key = service.resolve(TTSRequest(text=SIX, voice="tone-low")).key
    body = urllib.parse.urlencode({"voice": "tone-low", "text": SIX}).encode()
    form_type = "application/x-www-form-urlencoded"
    hang_up_after(server, "/api/tts", body, form_type, in_engine(service), accept=accept)
    assert wait_until(lambda: "client disconnected" in caplog.text)
    engine.let(1)
    assert wait_until(lambda: cancelled(service) == 5)
    assert wait_until(lambda: len(service.singleflight.flights) == 0)
    assert engine.calls == 1 and engine.finished == 1 and in_engine(service, 0)()
    service.cache.flush()
    assert service.cache.lookup(key) is None
    engine.let(5)
    again = service.synthesise(TTSRequest(text=SIX, voice="tone-low"))
    assert again.info["segments_reused"] == 1 and engine.calls == 1 + 5


def test_a_second_request_for_the_same_text_keeps_the_work_going(
    server: LiveServer, service: TTSService, engine: GatedTone, caplog: pytest.LogCaptureFixture
) -> None:
    """Two clients ask for the same six sentences; the first hangs up during sentence
    one: the second still waits, so all six are made (once each) and stored."""
    caplog.set_level(logging.INFO, logger="lib.api.attended")
    key = service.resolve(TTSRequest(text=SIX, voice="tone-low")).key
    body = urllib.parse.urlencode({"voice": "tone-low", "text": SIX}).encode()
    answers: list[httpx.Response] = []

    def second() -> None:
        answers.append(httpx.post(server.url + "/api/tts", data={"voice": "tone-low", "text": SIX}, timeout=60))

    thread = threading.Thread(target=second, daemon=True)

    def both_wait() -> bool:
        if not thread.is_alive() and not answers:
            thread.start()
        return service.singleflight.flights.waiters(key) == 2

    hang_up_after(
        server, "/api/tts", body, "application/x-www-form-urlencoded", lambda: in_engine(service)() and both_wait()
    )
    assert wait_until(lambda: "client disconnected" in caplog.text)
    engine.let(6)
    thread.join(60)
    assert answers[0].status_code == 200 and answers[0].headers["x-segments"] == "6"
    assert engine.calls == 6 and cancelled(service) == 0
    service.cache.flush()
    assert service.cache.lookup(key) is not None  # the whole, stored
    assert service.synthesise(TTSRequest(text=SIX, voice="tone-low")).cache == "HIT"


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
def test_a_v1_client_that_hangs_up_stops_the_sentences_not_yet_started(
    server: LiveServer, service: TTSService, engine: GatedTone, caplog: pytest.LogCaptureFixture, stream_format: str
) -> None:
    caplog.set_level(logging.INFO, logger="lib.api.attended")
    doc = {
        "model": "tts-1",
        "voice": "tone-low",
        "input": SIX,
        "response_format": "wav",
        "stream_format": stream_format,
    }
    hang_up_after(server, "/v1/audio/speech", json.dumps(doc).encode(), "application/json", in_engine(service))
    assert wait_until(lambda: "client disconnected" in caplog.text)
    engine.let(1)
    assert wait_until(lambda: cancelled(service) == 5)
    assert wait_until(lambda: len(service.singleflight.flights) == 0)
    assert engine.calls == 1 and in_engine(service, 0)()


class OneAtATime(GatedTone):
    """:class:`GatedTone` taking one call at a time: the others queue in the watchdog."""

    concurrent_calls = 1


def test_a_sentence_another_request_waits_for_is_made_for_it(make_service: Any) -> None:
    """B's text begins with a sentence that A's text begins with too; B's caller leaves
    while that sentence still queues for the engine, with A waiting for it: it is made
    (once) and stored, and only B's own next sentence is dropped."""
    engine = OneAtATime()
    service = make_service(engine=engine, **{"templates.file": None})
    shared, own_b, own_a = "第二句话说的是交通。", "另一句话说的是别的。", "第三句话说的是时间。"
    errors: list[BaseException] = []
    results: list[Any] = []

    def speak(text: str, caller: Caller) -> None:
        try:
            with waited_by(caller):
                results.append(service.synthesise(TTSRequest(text=text, voice="tone-low")))
        except BaseException as exc:
            errors.append(exc)

    try:
        blocker = threading.Thread(target=speak, args=("别的话。", Caller()), daemon=True)
        blocker.start()
        assert wait_until(in_engine(service))  # the one slot is taken
        caller_b, caller_a = Caller(), Caller()
        b = threading.Thread(target=speak, args=(shared + own_b, caller_b), daemon=True)
        b.start()
        part = service.resolve(TTSRequest(text=shared + own_b, voice="tone-low"))
        shared_key = service._resolver.part(part, shared).key
        assert wait_until(lambda: service.singleflight.flights.waiters(shared_key) == 1)
        a = threading.Thread(target=speak, args=(shared + own_a, caller_a), daemon=True)
        a.start()
        assert wait_until(lambda: service.singleflight.flights.waiters(shared_key) == 2)
        caller_b.leave()
        engine.let(3)  # the blocker, the shared sentence, A's own
        a.join(30)
        b.join(30)
        blocker.join(30)
        assert engine.calls == 3 and len(results) == 2  # the blocker's and A's
        assert len(errors) == 1 and isinstance(errors[0], AbandonedError)  # B's
        assert cancelled(service) == 1  # B's own sentence only
        assert results[-1].info["segments_synthesised"] + results[-1].info["segments_reused"] == 2
        assert service.cache.lookup(shared_key) is not None
    finally:
        engine.let(10)


# -- a crash mid-stream -----------------------------------------------------------------


@pytest.mark.slow  # a killed process
def test_kill_9_mid_stream_loses_no_segment_the_client_has_heard(tmp_path: Path, testdata_dir: Path) -> None:
    """The real server (builtin engine, espeak base, a cloned voice: about 0.2 s per sentence) is
    killed (SIGKILL) the moment the client gets the first audio of the third sentence,
    while another writer holds the audio store busy for a moment (its writes queue):
    every segment of which the client got any audio is on disk afterwards, because each
    is stored before its audio is sent. Before, the writer's queue died with the process
    and none of them was stored."""
    text = " ".join(f"This is sentence number {i} of a paragraph about the weather." for i in range(1, 9))
    prompt = (testdata_dir / "zh_female_prompt.wav").read_bytes()
    request = TTSRequest(text=text, prompt_audio=prompt, mode="cross_lingual")
    # The espeak base: the subject is what is stored when, not the voice (the Kokoro base
    # made this test take 80 s of a CI run).
    env = {"TTS_ENGINE": "builtin", "TTS_BUILTIN_BASE": "espeak", "TTS_WATCHDOG_PROBE_INTERVAL": "0",
           "TTS_TEMPLATES_FILE": "null"}  # fmt: skip

    # The same request in this process, with a cache of its own: the keys of its segments
    # and where the audio of each begins in the stream (the same bytes, bit for bit).
    config = load_config(env={**env, "TTS_CACHE_DIR": str(tmp_path / "rehearsal"), "TTS_VOICES_PREWARM": "false"})
    svc = TTSService(config)
    try:
        r = svc.resolve(request)
        # Each segment's raw request: its own text and reading part (lib.pipeline.resolve.Resolver.part).
        keys = [svc._resolver.part(r, s.text).key for s in split(r.fields.text, config.segments.max_chars)]
        starts = np.cumsum([0] + [c.size * 2 for c in svc.stream(request).chunks])[:-1]
    finally:
        svc.close()

    cache = tmp_path / "cache"
    server = ServerProcess(cache, tmp_path / "server.log", **env).start()
    received = 0
    busy = threading.Event()
    # 3 s: well under the store's 60 s busy time-out (its writes wait, none fails).
    holder = threading.Thread(target=hold_write_lock, args=(cache / "audio" / "cache.db", 3.0, busy), daemon=True)
    holder.start()
    assert busy.wait(30)
    try:
        form = {"text": text, "mode": "cross_lingual", "stream": "true", "format": "pcm"}
        with httpx.stream("POST", server.url + "/api/tts", data=form, timeout=300,
                          files={"prompt_audio": ("prompt.wav", prompt, "audio/wav")}) as response:  # fmt: skip
            assert response.status_code == 200 and response.headers["x-cache"] == "MISS"
            for data in response.iter_raw():
                received += len(data)
                if received > starts[2]:  # the first audio of the third sentence
                    server.kill()
                    break
    finally:
        server.kill()
        holder.join(30)
    store = diskcache.Cache(str(cache / "audio"))
    on_disk = set(store.iterkeys())
    store.close()
    heard = int(np.sum(starts < received))  # segments of which the client got audio
    assert heard == 3 and len(keys) == 8
    assert all(key in on_disk for key in keys[:heard]), [key in on_disk for key in keys]
    print(f"\nkill -9 after {received} bytes: {heard} segments heard, "
          f"{sum(key in on_disk for key in keys)} of {len(keys)} segments on disk")  # fmt: skip
