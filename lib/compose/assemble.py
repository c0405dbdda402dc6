"""How pieces of engine audio become one result: trimming, loudness, pauses, crossfades
and the tail of silence.

A result is made of *units*: the sentence segments of a text (:mod:`lib.compose.segments`), or
one template sentence composed from its pieces (:mod:`lib.compose.templates`). Each unit is
trimmed of the silence the engine left at its edges (so that the pauses are the ones
configured, not the engine's), brought to the loudness target on its own (so a quiet
sentence next to a loud one is not left quiet, and so that a unit can be finished, and
streamed, before the next exists), then joined: a pause by punctuation with short fades,
or, where there is no pause, a crossfade. Every result ends with a tail of silence.

:class:`Joiner` emits audio as units arrive and the concatenation of what it emits is
the whole result, bit for bit: the streamed answer and the cached one are one thing.

:attr:`Finish.recipe` names all of this in the key of every finished result (see
:class:`lib.cache.keys.KeyFields`): a change of any setting makes new keys, while the
segments, which are raw engine output, are reused as they are.

The loudness target is the level of the *neutral* voice. A style that asks for a level
("loud", "soft"; :data:`STYLE_LEVELS`) keeps it: its units are brought to the target plus
the style's gain (loud +4.1 dB, soft -6.0 dB: the builtin engine's energy factors x1.6
and x0.5), peaks still limited to -1 dBFS. Levelling to the target alone undid the
style (the three files measured -16.3 LUFS). Such results name the gain in their recipe
(:meth:`Finish.recipe_for`), so their keys changed; results without one keep theirs.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.compose.loudness import gain_db, integrated_loudness, limit, normalise
from lib.compose.segments import SPLIT_VERSION
from lib.config import AppConfig

__all__ = [
    "ASSEMBLY_VERSION", "STYLE_LEVELS", "Finish", "Joiner", "PieceFinisher", "pieces_of", "style_level_db", "to_float",
    "trim", "unit_loudness",
]  # fmt: skip

_LOGGER = logging.getLogger(__name__)

#: Part of every recipe: bump when trimming, gain or joining change what they make.
ASSEMBLY_VERSION = 1

#: Style words that set a level, with the factor (of amplitude) they set it by, relative
#: to the neutral voice at the loudness target. The factors are the builtin engine's
#: "energy" (docs/builtin-engine.md); words of one line count once, and the lines multiply.
STYLE_LEVELS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("loud", "loudly", "louder", "大声", "响亮"), 1.6),
    (("soft", "softly", "quiet", "quietly", "whisper", "轻声", "小声", "柔和", "轻柔"), 0.5),
    (("sad", "sadly", "unhappy", "悲伤", "难过", "伤心"), 0.8),
    (("excited", "excitedly", "激动", "兴奋"), 1.2),
)
_WORDS = re.compile(r"[a-z]+")


def style_level_db(style: str) -> float:
    """The gain in dB a style asks for over the neutral level (0.0 for none): English
    words whole (case-insensitive), Chinese words anywhere in the instruction."""
    words = set(_WORDS.findall(style.lower()))
    factor = 1.0
    for names, level in STYLE_LEVELS:
        if any(name in words if name.isascii() else name in style for name in names):
            factor *= level
    return round(20.0 * math.log10(factor), 2) if factor != 1.0 else 0.0


#: Silence kept before the first and after the last loud sample of a unit, in seconds.
_LEAD, _TRAIL = 0.02, 0.04
#: "Loud" starts this far below the unit's peak (and never below -80 dBFS).
_SILENCE_DB = -45.0


@dataclass(frozen=True)
class Finish:
    """The settings that turn units into a result (``segments:`` and ``templates:`` in
    config.yaml)."""

    max_chars: int = 80
    pause_sentence: float = 0.3
    pause_clause: float = 0.15
    crossfade: float = 0.01
    tail: float = 0.2
    loudness: float | None = -16.0
    char_gap: float = 0.06
    """Pause between the spelled characters of a template slot (not in the recipe:
    composed answers are never stored)."""

    @classmethod
    def from_config(cls, config: AppConfig) -> Finish:
        s = config.segments
        return cls(
            max_chars=s.max_chars, pause_sentence=s.pause_sentence, pause_clause=s.pause_clause,
            crossfade=s.crossfade, tail=s.tail, loudness=s.loudness, char_gap=config.templates.char_gap,
        )  # fmt: skip

    @property
    def identity(self) -> bool:
        """Whether a single-segment result is the engine's audio untouched (no tail, no
        loudness target): then its key is the one it had before segments existed."""
        return self.tail == 0 and self.loudness is None

    @property
    def recipe(self) -> str:
        """Canonical text of every setting that changes an assembled result."""
        return self.recipe_for("")

    def recipe_for(self, style: str) -> str:
        """:attr:`recipe` of a result in ``style``: with the style's level gain
        (``"style_db"``) when it has one and a loudness target applies; the same text
        as :attr:`recipe` otherwise (those keys did not change)."""
        doc: dict[str, Any] = {
            "v": [SPLIT_VERSION, ASSEMBLY_VERSION],
            "max": self.max_chars,
            "pause": [round(self.pause_sentence, 3), round(self.pause_clause, 3)],
            "xf": round(self.crossfade, 4),
            "tail": round(self.tail, 3),
            "lufs": None if self.loudness is None else round(self.loudness, 2),
        }
        gain = style_level_db(style) if self.loudness is not None else 0.0
        if gain:
            doc["style_db"] = gain
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    def pause(self, kind: str) -> float:
        """Seconds of silence after a segment whose pause is ``kind``."""
        return {"sentence": self.pause_sentence, "clause": self.pause_clause}.get(kind, 0.0)

    def level(self, x: NDArray[Any], rate: int, loudness: float | None = None, *, style: str = "") -> NDArray[Any]:
        """``x`` brought to the loudness target plus the level ``style`` asks for
        (:func:`style_level_db`), peaks limited; unchanged without a target.
        ``loudness``: its loudness when known."""
        if self.loudness is None or x.size == 0:
            return x
        return normalise(x, rate, self.loudness + style_level_db(style), loudness)

    def unit(
        self, pcm: NDArray[Any], rate: int, meta: Mapping[str, Any] | None = None, *, style: str = ""
    ) -> NDArray[Any]:
        """One unit ready to join: trimmed and levelled float32 (``style``: the result's,
        for its level). ``meta``: the segment's, whose ``unit_lufs`` (see
        :func:`unit_loudness`) spares measuring it again; a unit the engine made in pieces
        (``info.pieces``) is finished piece by piece (:class:`PieceFinisher`), as it was
        when it was streamed, to the same samples."""
        sizes = pieces_of(meta, pcm.size)
        if sizes:  # a unit the engine made in pieces, even one
            finisher = PieceFinisher(self, rate, style=style)
            parts = [finisher.add(p) for p in np.split(np.asarray(pcm), np.cumsum(sizes)[:-1])]
            return np.concatenate([*parts, finisher.end()])
        x = trim(to_float(pcm), rate)
        known = (meta or {}).get("unit_lufs")
        loudness = float(known[1]) if isinstance(known, list) and known[:1] == [ASSEMBLY_VERSION] else None
        return self.level(x, rate, loudness, style=style)

    def silence(self, seconds: float, rate: int) -> NDArray[Any]:
        return np.zeros(round(seconds * rate), dtype=np.float32)


def pieces_of(meta: Mapping[str, Any] | None, size: int) -> list[int]:
    """The sizes of the pieces an engine made a unit in (``meta["info"]["pieces"]``, kept
    by :mod:`lib.compose.produce` for an engine that makes a request in pieces, even one),
    when they add up to ``size``; else []."""
    info = (meta or {}).get("info")
    sizes = info.get("pieces") if isinstance(info, Mapping) else None
    if not isinstance(sizes, list) or not sizes or not all(isinstance(n, int) and n > 0 for n in sizes):
        return []
    return list(sizes) if sum(sizes) == size else []


class PieceFinisher:
    """A unit finished as its pieces come (a sentence the engine streams in pieces), so
    that a stream sends each piece at once: what :meth:`Finish.unit` does to a whole unit,
    with what only the end can decide held back.

    - The silence floor (-45 dB under the peak) and the start are the first piece's; the
      level gain is measured on the first piece (trimmed), not on the whole (which does not
      exist yet): the engine gives a sentence's pieces one level already.
    - The quiet end of each piece is held until the next piece comes (it was a pause
      inside the sentence) or the unit ends (then :data:`_TRAIL` of it is kept).

    Each part it gives is levelled on its own; :meth:`Finish.unit` repeats the same steps
    on a stored unit's pieces, so a replay is the same samples."""

    def __init__(self, finish: Finish, rate: int, *, style: str = "") -> None:
        self.finish, self.rate, self.style = finish, rate, style
        self._floor: float | None = None
        self._gain: float | None = None
        self._quiet: NDArray[Any] = np.zeros(0, dtype=np.float32)

    def add(self, pcm: NDArray[Any]) -> NDArray[Any]:
        """The finished audio of the next piece (int16) that can be sent now."""
        x = to_float(pcm)
        if self._floor is None:
            if x.size == 0:
                return x
            peak = float(np.abs(x).max())
            self._floor = max(peak * 10.0 ** (_SILENCE_DB / 20.0), 1e-4)
            loud = np.flatnonzero(np.abs(x) > self._floor)
            start = max(int(loud[0]) - int(_LEAD * self.rate), 0) if loud.size else 0
            x = x[start:]
            first = trim(x, self.rate)
            self._gain = 0.0
            if self.finish.loudness is not None and first.size:
                level = self.finish.loudness + style_level_db(self.style)
                self._gain = gain_db(first, self.rate, level)
        loud = np.flatnonzero(np.abs(x) > self._floor)
        if loud.size == 0:
            self._quiet = np.concatenate([self._quiet, x])
            return np.zeros(0, dtype=np.float32)
        ready = np.concatenate([self._quiet, x[: int(loud[-1]) + 1]])
        self._quiet = x[int(loud[-1]) + 1 :]
        return self._level(ready)

    def end(self) -> NDArray[Any]:
        """The rest of the unit: :data:`_TRAIL` of its final quiet."""
        rest = self._quiet[: int(_TRAIL * self.rate)]
        self._quiet = np.zeros(0, dtype=np.float32)
        return self._level(rest)

    def _level(self, x: NDArray[Any]) -> NDArray[Any]:
        if self.finish.loudness is None or x.size == 0:
            return np.asarray(x, dtype=np.float32)
        out: NDArray[Any] = limit(x * np.float32(10.0 ** ((self._gain or 0.0) / 20.0)), self.rate)
        return out


def unit_loudness(pcm: NDArray[Any], rate: int) -> list[float]:
    """``[ASSEMBLY_VERSION, LUFS]`` of a segment as a unit (trimmed), kept in its entry's
    meta when it is made, so that every result reusing it skips the measurement."""
    loudness = integrated_loudness(trim(to_float(pcm), rate), rate)
    return [ASSEMBLY_VERSION, round(loudness, 4) if math.isfinite(loudness) else -200.0]


def to_float(pcm: NDArray[Any]) -> NDArray[Any]:
    """int16 -> float32 on the scale :func:`lib.audio.pcm.float_to_int16` inverts exactly."""
    out: NDArray[Any] = np.asarray(pcm, dtype=np.float32) / np.float32(32767.0)
    return out


def trim(x: NDArray[Any], rate: int) -> NDArray[Any]:
    """``x`` without the silence at its edges, keeping a short margin of it."""
    if x.size == 0:
        return x
    magnitude = np.abs(x)
    peak = float(magnitude.max())
    floor = max(peak * 10.0 ** (_SILENCE_DB / 20.0), 1e-4)
    loud = np.flatnonzero(magnitude > floor)
    if loud.size == 0:
        return x
    start = max(int(loud[0]) - int(_LEAD * rate), 0)
    end = min(int(loud[-1]) + 1 + int(_TRAIL * rate), x.size)
    return x[start:end]


class Joiner:
    """Joins units as they come: ``push`` returns what can be played now, ``close``
    the rest. Linear fades of ``crossfade`` seconds at every unit's edges; where the gap
    after a unit is 0 its fade-out overlaps the next unit's fade-in (a crossfade), so
    the last samples of such a unit are held back until the next one arrives."""

    def __init__(self, rate: int, crossfade: float) -> None:
        self.rate = rate
        self.fade = max(round(crossfade * rate), 0)
        self._held: NDArray[Any] | None = None
        self._unit_fade: int | None = None
        self._kept: NDArray[Any] = np.zeros(0, dtype=np.float32)

    def push(self, x: NDArray[Any], gap: float) -> NDArray[Any]:
        """Add a unit followed by ``gap`` seconds of silence (0: crossfade into the next)."""
        x = np.array(x, dtype=np.float32, copy=True)
        n = min(self.fade, x.size // 2)
        if n:
            ramp = np.linspace(0.0, 1.0, n + 2, dtype=np.float32)[1:-1]
            x[:n] *= ramp
            x[-n:] *= ramp[::-1]
        parts: list[NDArray[Any]] = []
        if self._held is not None:
            held, self._held = self._held, None
            m = min(held.size, n)  # the held fade-out lies over this unit's fade-in
            if m:
                x[:m] += held[held.size - m :]
            parts.append(held[: held.size - m])
        if gap > 0:
            parts += [x, np.zeros(round(gap * self.rate), dtype=np.float32)]
        else:
            parts.append(x[: x.size - n])
            self._held = x[x.size - n :] if n else None
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def begin(self) -> None:
        """A unit that comes in parts starts (:meth:`feed` its parts, then :meth:`finish`):
        the same samples as :meth:`push` of the whole, sent as the parts come."""
        self._unit_fade = None
        self._kept = np.zeros(0, dtype=np.float32)

    def feed(self, x: NDArray[Any]) -> NDArray[Any]:
        """The next part of the unit begun: what can be played now (its last fade's worth
        of samples is kept for the fade-out)."""
        x = np.array(x, dtype=np.float32, copy=True)
        parts: list[NDArray[Any]] = []
        if self._unit_fade is None:
            if x.size == 0:
                return x
            n = self._unit_fade = min(self.fade, x.size // 2)
            if n:
                x[:n] *= np.linspace(0.0, 1.0, n + 2, dtype=np.float32)[1:-1]
            if self._held is not None:
                held, self._held = self._held, None
                m = min(held.size, n)
                if m:
                    x[:m] += held[held.size - m :]
                parts.append(held[: held.size - m])
        y = np.concatenate([self._kept, x])
        n = self._unit_fade
        self._kept = y[y.size - n :] if n else np.zeros(0, dtype=np.float32)
        parts.append(y[: y.size - n])
        return np.concatenate(parts)

    def finish(self, gap: float) -> NDArray[Any]:
        """The unit begun ends, followed by ``gap`` seconds of silence (0: its fade-out is
        held to overlap the next unit's fade-in)."""
        n = self._unit_fade or 0
        kept, self._kept = self._kept, np.zeros(0, dtype=np.float32)
        if n:
            kept = kept * np.linspace(0.0, 1.0, n + 2, dtype=np.float32)[1:-1][::-1]
        if gap > 0:
            return np.concatenate([kept, np.zeros(round(gap * self.rate), dtype=np.float32)])
        self._held = kept if n else None
        return np.zeros(0, dtype=np.float32)

    def close(self, tail: float = 0.0) -> NDArray[Any]:
        """What is still held, then ``tail`` seconds of silence."""
        held = self._held if self._held is not None else np.zeros(0, dtype=np.float32)
        self._held = None
        return np.concatenate([held, np.zeros(round(tail * self.rate), dtype=np.float32)])
