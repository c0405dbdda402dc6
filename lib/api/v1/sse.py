"""``stream_format: "sse"``: OpenAI's speech event stream, as server-sent events.

Each event is one ``data:`` line of JSON and a blank line (no ``event:`` line: OpenAI's
speech stream has none, and simple clients split on blank lines and strip ``data: ``):

- ``{"type": "speech.audio.delta", "audio": "<base64>"}``: the next bytes of the audio
  in the requested format; joined, the deltas are that format's file (or raw PCM);
- ``{"type": "speech.audio.done", "usage": {...}, "cache": "HIT", "key": "<32 hex>"}``:
  the end; ``cache`` and ``key`` are this server's extras (``X-Cache``, ``X-Cache-Key``);
- ``{"type": "speech.audio.error", "error": {...}}``: a failure after the first event,
  when a status code can no longer say it (OpenAI's error object); the stream ends.

Usage, counted the same for a hit as for a miss (it describes the answer, not the work):
``input_tokens`` are the characters of ``input`` and ``instructions`` (this server has no
text tokenizer; a character is the unit of its text limits), ``output_tokens`` the
audio's length at 25 tokens a second (the speech-token rate of CosyVoice 2/3; OpenAI does
not publish its own), rounded up.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["AUDIO_TOKENS_PER_SECOND", "DELTA_BYTES", "delta", "done", "error", "split", "usage"]

#: Audio tokens per second of output in ``usage``.
AUDIO_TOKENS_PER_SECOND = 25
#: Most audio bytes in one delta event (a hit's audio is cut into these).
DELTA_BYTES = 32 * 1024


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def delta(audio: bytes) -> bytes:
    return _event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode("ascii")})


def done(usage: dict[str, int], cache: str, key: str) -> bytes:
    return _event({"type": "speech.audio.done", "usage": usage, "cache": cache, "key": key})


def error(message: str, kind: str = "server_error") -> bytes:
    body = {"message": message, "type": kind, "param": None, "code": None}
    return _event({"type": "speech.audio.error", "error": body})


def usage(text: str, instructions: str, seconds: float) -> dict[str, int]:
    """The ``usage`` of an answer (see the module)."""
    inputs = len(text) + len(instructions)
    outputs = math.ceil(round(seconds * AUDIO_TOKENS_PER_SECOND, 6))
    return {"input_tokens": inputs, "output_tokens": outputs, "total_tokens": inputs + outputs}


def split(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Delta events for ``pieces`` of audio, none over :data:`DELTA_BYTES`."""
    for piece in pieces:
        for at in range(0, len(piece), DELTA_BYTES):
            yield delta(piece[at : at + DELTA_BYTES])
