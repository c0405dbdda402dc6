"""What every engine's audio must be before a listener hears it or the cache keeps it.

An engine can fail without raising: a numeric library computing wrongly on one CPU
(onnxruntime's int8 convolution on AVX512-VNNI/AMX machines, ``docs/kokoro.md``) gives
NaN, infinities, spikes of 1e30, or a click where a sentence should be. Post-processing
then hides the damage (a trim keeps the one loud spike; a NaN chunk trims to nothing).
So audio is checked where it is still raw, and the checks are the same for every engine:

- :func:`check_chunk`: every chunk an engine returns, before any trimming or levelling:
  finite, and its peak within :data:`PEAK_LIMIT` (float full scale is 1.0);
- :func:`check_duration`: a sentence (or a whole result) against the length its reading
  allows (:func:`bounds`): seconds per syllable between bounds no real voice at speed
  0.25-4.0 crosses, so a sentence dropped, cut to a click or run on for minutes fails;
- :func:`check_result`: the whole result before it is stored: not empty, not silent.

Each raises :class:`InvalidAudioError` (HTTP 503, "the engine produced invalid audio"),
whose ``reason`` labels ``tts_engine_invalid_audio_total{engine,reason}``; the producer
(:mod:`lib.compose.produce`), the one path every engine's audio takes, counts it and caches
nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.errors import EngineError
from lib.text.tokens import Reading, Token

__all__ = [
    "NO_BOUNDS",
    "PEAK_LIMIT",
    "REASONS",
    "Bounds",
    "InvalidAudioError",
    "bounds",
    "check_chunk",
    "check_duration",
    "check_result",
    "implausible",
    "reading_syllables",
    "sentence_tokens",
    "units",
]

#: Largest magnitude a float sample may have. Speech is within 1.0; a neural vocoder
#: overshoots a little (Kokoro peaks up to 1.06); 2.0 (+6 dB) is never speech.
PEAK_LIMIT = 2.0
#: Why audio was refused: the ``reason`` label of the metric.
REASONS = ("non_finite", "peak", "empty", "silent", "too_short", "too_long")
#: Seconds per syllable at speed 1.0 that real speech stays between. Measured rates:
#: Kokoro Mandarin 0.19 s per character, espeak-ng 0.26, fast human speech about 0.12;
#: the slowest reading of one syllable with its pauses under 1 s. The bounds are a factor
#: of about 3-4 outside those, so that only broken audio crosses them.
MIN_PER_SYLLABLE, MAX_PER_SYLLABLE = 0.045, 1.2
#: Extra seconds a sentence may take beyond its syllables (edge silence, pauses).
SLACK_SECONDS = 1.5
#: Peak below which a whole result is silence (int16 4 of 32767).
SILENT_PEAK = 4 / 32767
_SENTENCE_ENDS = frozenset({".", "?", "!"})
_VOWELS = re.compile(r"[aeiouy]+")


class InvalidAudioError(EngineError):
    """The engine produced audio no listener may hear: non-finite, out of range, empty,
    silent, or of a length its text cannot have (HTTP 503); nothing was cached."""

    http_status = 503

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(
            f"the engine produced invalid audio ({detail}); nothing was cached, try again or change the text"
        )
        self.reason = reason


@dataclass(frozen=True)
class Bounds:
    """Fewest and most syllables a stretch of reading can be heard as."""

    low: int
    high: int

    def __add__(self, other: Bounds) -> Bounds:
        return Bounds(self.low + other.low, self.high + other.high)


#: Bounds of nothing (a stretch whose length is not checked).
NO_BOUNDS = Bounds(0, 0)


def _word_syllables(word: str) -> tuple[int, int]:
    """A word's fewest and most syllables. A word of one letter, or with no vowel letter
    ("b", "hmm", "psst"), may be said as a bare sound: at least none."""
    groups = len(_VOWELS.findall(word.lower()))
    if len(word) == 1 or groups == 0:
        return 0, 3
    return max(1, groups - 1), groups + 1


def units(tokens: Iterable[Token]) -> Bounds:
    """Syllable bounds of ``tokens``: one per Mandarin syllable; English words by their
    vowel groups; a letter one to three (``W`` is "double-u")."""
    low = high = 0
    for token in tokens:
        parts = token.units
        if token.kind == "zh":
            low += len(parts)
            high += len(parts)
        elif token.kind == "letters":
            low += len(parts)
            high += 3 * len(parts)
        elif token.kind == "en":
            for word in parts:
                lo, hi = _word_syllables(word)
                low += lo
                high += hi
    return Bounds(low, high)


def sentence_tokens(reading: Reading) -> list[list[Token]]:
    """The reading's tokens cut after each sentence end (``. ? !``); empty ones dropped."""
    out: list[list[Token]] = [[]]
    for token in reading.tokens:
        out[-1].append(token)
        if token.kind == "pause" and token.reading in _SENTENCE_ENDS:
            out.append([])
    return [s for s in out if any(t.kind != "pause" for t in s)]


def bounds(syllables: Bounds, speed: float, sentences: int = 1) -> tuple[float, float]:
    """Shortest and longest plausible seconds for ``syllables`` said at ``speed`` in
    ``sentences`` sentences."""
    speed = float(speed) if speed and speed > 0 else 1.0
    low = syllables.low * MIN_PER_SYLLABLE / speed
    high = (syllables.high * MAX_PER_SYLLABLE + SLACK_SECONDS * max(1, sentences)) / speed
    return low, high


def check_chunk(audio: NDArray[Any], what: str = "a chunk") -> NDArray[Any]:
    """``audio`` as a flat array if every sample is finite and within :data:`PEAK_LIMIT`."""
    arr = np.asarray(audio).reshape(-1)
    if arr.size == 0:
        return arr
    if np.issubdtype(arr.dtype, np.integer):
        return arr  # int PCM is in range by construction
    if not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise InvalidAudioError("non_finite", f"{what} has {bad} NaN or infinite samples of {arr.size}")
    peak = float(np.max(np.abs(arr)))
    if peak > PEAK_LIMIT:
        raise InvalidAudioError("peak", f"{what} peaks at {peak:.3g}, over {PEAK_LIMIT} of full scale")
    return arr


def check_duration(
    seconds: float, syllables: Bounds, speed: float, what: str = "a sentence", *, sentences: int = 1,
    paced: bool = True,
) -> None:  # fmt: skip
    """Raise unless ``seconds`` is a plausible length for ``syllables`` at ``speed`` in
    ``sentences`` sentences (no upper bound unless ``paced``: its length follows its reading)."""
    if syllables.high <= 0:
        return
    low, high = bounds(syllables, speed, sentences)
    if seconds < low:
        raise InvalidAudioError(
            "too_short", f"{what} of {syllables.low} syllables lasted {seconds:.2f} s, under {low:.2f} s"
        )
    if paced and seconds > high:
        raise InvalidAudioError(
            "too_long", f"{what} of {syllables.high} syllables lasted {seconds:.2f} s, over {high:.2f} s"
        )


def reading_syllables(reading: Reading) -> tuple[Bounds, int]:
    """The syllable bounds of a whole reading and its number of sentences."""
    sentences = sentence_tokens(reading)
    total = NO_BOUNDS
    for sentence in sentences:
        total = total + units(sentence)
    return total, len(sentences)


def check_result(
    audio: NDArray[Any], rate: int, reading: Reading | None, speed: float, *, paced: bool = True
) -> NDArray[Any]:
    """The whole result before it is stored: chunk checks, not empty, not silent, and a
    length its reading allows (every sentence at least its shortest; and at most its
    longest when the engine is ``paced``: its length follows its reading). Returns it flat."""
    arr = check_chunk(audio, "the result")
    if arr.size == 0:
        raise InvalidAudioError("empty", "no samples")
    scale = 32767.0 if np.issubdtype(arr.dtype, np.integer) else 1.0
    if float(np.max(np.abs(arr))) / scale < SILENT_PEAK:
        raise InvalidAudioError("silent", "only silence")
    if reading is not None:
        total, count = reading_syllables(reading)
        check_duration(arr.size / rate, total, speed, f"{count} sentence(s)", sentences=count, paced=paced)
    return arr


def implausible(
    pcm: NDArray[Any], rate: int, meta: Mapping[str, Any], read: Callable[[str], Reading] | None = None
) -> str | None:
    """Why a stored entry (int16 ``pcm``) cannot be what its metadata says, or None: silent,
    or shorter than its stored text can be said (at the stored speed; 1.0, the default, for
    entries that did not record one). Never "too long": composed entries hold pauses.
    ``cache verify`` removes such entries (a runtime that cut sentences to a click once stored
    them)."""
    try:
        check_result(pcm, rate, None, 1.0)
        text = meta.get("text")
        if read is None or not isinstance(text, str) or not text.strip():
            return None
        speed = meta.get("speed")
        speed = float(speed) if isinstance(speed, (int, float)) and 0 < speed <= 10 else 1.0
        total, count = reading_syllables(read(text))
        check_duration(pcm.size / rate, total, speed, "the entry", sentences=count, paced=False)
    except InvalidAudioError as exc:
        return exc.reason
    return None
