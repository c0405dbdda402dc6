"""Helpers of the OpenAI-compatibility tests: a decoder and tag reader independent of
the app's encoders (the ffmpeg and ffprobe programs from apt), and an SSE parser."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

__all__ = ["ffdecode", "ffprobe", "needs_ffmpeg", "sse_audio", "sse_events"]

needs_ffmpeg = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None, reason="the ffmpeg program (apt) is needed"
)


def ffprobe(data: bytes) -> dict[str, Any]:
    """ffprobe's view of a file: its first stream and its tags (format's and stream's)."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=sample_rate,codec_name,channels:stream_tags:format_tags",
         "-of", "json", "-i", "pipe:0"],
        input=data, capture_output=True, check=True,
    )  # fmt: skip
    doc = json.loads(out.stdout)
    stream = doc["streams"][0]
    tags = {k.upper(): v for k, v in {**doc.get("format", {}).get("tags", {}), **stream.get("tags", {})}.items()}
    return {"rate": int(stream["sample_rate"]), "codec": stream["codec_name"], "tags": tags}


def ffdecode(data: bytes) -> tuple[NDArray[Any], int]:
    """The file decoded by the ffmpeg program: mono int16 samples and their rate."""
    rate = ffprobe(data)["rate"]
    out = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", "pipe:0", "-f", "s16le", "-acodec", "pcm_s16le", "-ac", "1", "pipe:1"],
        input=data, capture_output=True, check=True,
    )  # fmt: skip
    return np.frombuffer(out.stdout, dtype="<i2"), rate


def sse_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON payloads of a server-sent event stream, in order."""
    events: list[dict[str, Any]] = []
    data: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            events.append(json.loads("\n".join(data)))
            data = []
    return events


def sse_audio(events: list[dict[str, Any]]) -> bytes:
    """The audio of the delta events, joined."""
    return b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
