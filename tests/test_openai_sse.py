"""``stream_format: "sse"`` through the real ``openai`` client and a real server: the
events parse, the deltas join to the very audio of the non-streamed answer, ``done``
carries usage and the cache outcome, a hit comes whole at once, and a failure after the
first event is an error event."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from lib.api import create_app
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from tests.api_server import LiveServer
from tests.openai_helpers import sse_audio, sse_events

TEXT = "First sentence here. Second sentence there. Third one to end."


class SecondFails(ToneEngine):
    """The tone engine, failing on any sentence that starts with "Second" when armed."""

    armed = False

    def synthesise(self, text: str, *args: Any, **kwargs: Any) -> Any:
        if self.armed and text.startswith("Second"):
            raise RuntimeError("boom")
        return super().synthesise(text, *args, **kwargs)


@pytest.fixture
def engine() -> SecondFails:
    return SecondFails()


@pytest.fixture
def service(tmp_path: Path, engine: SecondFails) -> Iterator[TTSService]:
    values = {"engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False}
    svc = TTSService(load_config(env={}, overrides=values), engine)
    yield svc
    svc.close()


@pytest.fixture
def server(service: TTSService) -> Iterator[LiveServer]:
    with LiveServer(create_app(service)) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")


def sse(client: openai.OpenAI, fmt: str, text: str = TEXT, **extra: Any) -> tuple[list[dict[str, Any]], Any]:
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="nova", input=text, response_format=fmt, stream_format="sse", **extra
    ) as response:
        events = sse_events(response.iter_lines())
        return events, response


def whole(client: openai.OpenAI, fmt: str, text: str = TEXT, **extra: Any) -> Any:
    return client.audio.speech.with_raw_response.create(
        model="gpt-4o-mini-tts", voice="nova", input=text, response_format=fmt, **extra
    )


def test_pcm_events_join_to_the_answer_and_a_hit_comes_whole(client: openai.OpenAI, engine: SecondFails) -> None:
    events, miss = sse(client, "pcm", instructions="calm")
    assert miss.http_request.headers["accept"] == "application/octet-stream"  # the SDK's, even for SSE
    assert miss.headers["content-type"].startswith("text/event-stream") and miss.headers["x-cache"] == "MISS"
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1) and len(events) > 2
    done = events[-1]
    assert done["type"] == "speech.audio.done" and done["cache"] == "MISS"
    audio = sse_audio(events)
    plain = whole(client, "pcm", instructions="calm")
    assert plain.headers["x-cache"] == "HIT" and audio == plain.content  # the very bytes, at 24 kHz
    seconds = len(audio) / 2 / 24_000
    assert done["usage"] == {
        "input_tokens": len(TEXT) + len("calm"),
        "output_tokens": math.ceil(round(seconds * 25, 6)),
        "total_tokens": len(TEXT) + len("calm") + math.ceil(round(seconds * 25, 6)),
    }
    again, hit = sse(client, "pcm", instructions="calm")
    assert hit.headers["x-cache"] == "HIT" and int(hit.headers["content-length"]) > 0  # whole, at once
    assert again[-1]["cache"] == "HIT" and again[-1]["usage"] == done["usage"] and sse_audio(again) == audio
    assert engine.calls == 3  # three sentences, made once


def test_wav_events_are_a_wav_stream_of_the_same_samples(client: openai.OpenAI) -> None:
    events, miss = sse(client, "wav")
    assert miss.headers["x-cache"] == "MISS"
    streamed = sse_audio(events)
    assert streamed[:4] == b"RIFF" and b"AIGC" in streamed[:1000]  # the label is in the stream's header
    stored = whole(client, "wav").content
    a, rate_a = sf.read(io.BytesIO(streamed), dtype="int16")
    b, rate_b = sf.read(io.BytesIO(stored), dtype="int16")
    assert rate_a == rate_b == 22_050 and np.array_equal(a, b)


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_other_formats_come_as_their_one_file(client: openai.OpenAI, fmt: str) -> None:
    events, _ = sse(client, fmt, text=f"A line in {fmt}.")
    assert events[-1]["type"] == "speech.audio.done"
    assert sse_audio(events) == whole(client, fmt, text=f"A line in {fmt}.").content


def test_a_failure_after_the_first_event_is_an_error_event(
    client: openai.OpenAI, engine: SecondFails, service: TTSService
) -> None:
    engine.armed = True
    events, response = sse(client, "pcm")
    assert response.status_code == 200 and events[0]["type"] == "speech.audio.delta"
    assert events[-1]["type"] == "speech.audio.error" and "nothing was cached" in events[-1]["error"]["message"]
    assert all(e["type"] != "speech.audio.done" for e in events)
    service.settle(30)
    assert service.cache.lookup(response.headers["x-cache-key"]) is None  # no whole was stored


def test_a_failure_before_the_first_event_is_an_http_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        sse(client, "pcm", text="   ")
    assert "text" in err.value.message


def test_the_body_follows_stream_format_never_accept(server: LiveServer) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": "accept headers", "response_format": "wav"}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for accept in ("application/octet-stream", "audio/wav", "application/json"):
            events = http.post("/v1/audio/speech", json={**body, "stream_format": "sse"}, headers={"Accept": accept})
            assert events.headers["content-type"].startswith("text/event-stream"), accept
            assert sse_events(events.text.splitlines())[-1]["type"] == "speech.audio.done"
        audio = http.post("/v1/audio/speech", json=body, headers={"Accept": "text/event-stream"})
        assert audio.headers["content-type"] == "audio/wav" and audio.content[:4] == b"RIFF"
