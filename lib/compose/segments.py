"""Splitting a text into sentence segments, each synthesised and cached on its own.

Why segments: a long text as one cache entry is synthesised again from scratch when one
sentence changes, and nothing of it plays until all of it is made. In segments, an
edited paragraph costs only its changed sentences, a sentence reused anywhere is a hit
(its key does not depend on where it stands), and the first sentence can play while the
next ones are made (:mod:`lib.pipeline.streaming`).

Rules (text is already normalised: NFKC, one space for any white space):

- A segment ends after ``。！？!?…`` (and ``...``), with any closing quotes or brackets
  that follow (``。”``), so a quoted sentence stays whole and an opening quote goes with
  the sentence it opens.
- A ``.`` ends a sentence only when followed by a space, a closing quote or the end of
  the text, and not inside a number (``3.5``), after an abbreviation (``Mr.``, ``e.g.``,
  ``U.S.``; :data:`ABBREVIATIONS`) or after a single capital (an initial: ``J. Smith``).
- A segment longer than ``max_chars`` is cut at its last clause mark (``，,、；;：:``)
  within the limit, else at its last space, else at the limit (not inside a Latin word
  or a number where that can be helped).
- A piece with fewer than two letters or digits ("好。", a stray "”") joins the segment
  before it (or after it, at the start): too short to be worth its own pause -- unless
  the two together would be longer than ``max_chars``. No segment is ever longer than
  ``max_chars``, whatever the text is made of.

Each segment carries the pause that follows it: ``sentence`` after a sentence end,
``clause`` after a cut at a clause mark or a space, ``none`` after a hard cut.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["ABBREVIATIONS", "NUMBER_ABBREVIATIONS", "SPLIT_VERSION", "Segment", "split"]

_LOGGER = logging.getLogger(__name__)

#: Part of the key of every assembled result: bump when the rules below change.
SPLIT_VERSION = 1

#: Words whose final ``.`` does not end a sentence (compared in lower case, inner dots kept).
ABBREVIATIONS = frozenset(
    [
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "etc", "e.g", "i.e", "approx",
        "dept", "est", "inc", "ltd", "co", "corp", "jan", "feb", "apr", "jun", "jul", "aug", "sep", "sept",
        "oct", "nov", "dec", "mon", "tue", "thu", "fri", "u.s", "u.k", "u.n", "a.m", "p.m", "ph.d", "cf",
        "al", "ave", "blvd", "rd",
    ]
)  # fmt: skip
#: Words that are abbreviations only before a number ("No. 5", but "I said no.").
NUMBER_ABBREVIATIONS = frozenset(["no", "nos", "vol", "ch", "pp", "fig", "figs", "tel", "ext", "p"])

_ENDS = frozenset("。！？!?…")
_CLAUSES = frozenset("，,、；;：:")
_CLOSERS = frozenset("”’」』）)》〉】]\"'")
_MIN_WORD_CHARS = 2


@dataclass(frozen=True)
class Segment:
    """One segment's text and the kind of pause after it (``sentence``, ``clause``, ``none``)."""

    text: str
    pause: str = "sentence"


def split(text: str, max_chars: int) -> list[Segment]:
    """The segments of ``text`` in order; one segment for a short single sentence.
    Every segment is a stretch of ``text`` itself (stripped), never rewritten."""
    if max_chars < 2:
        raise ValueError("max_chars must be at least 2")
    spans: list[tuple[int, int, str]] = []
    for start, end in _sentences(text):
        spans.extend(_cut(text, start, end, max_chars))
    merged = _merge_short(text, spans, max_chars)
    return [Segment(text[a:b].strip(), pause) for a, b, pause in merged]


def _sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence, white space at its edges excluded."""
    out: list[tuple[int, int]] = []
    start = i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch in _ENDS or (ch == "." and _ends_sentence(text, i)):
            end = i + 1
            while end < n and (text[end] in _ENDS or text[end] == "." or text[end] in _CLOSERS):
                end += 1
            out.extend(_stripped(text, start, end))
            start = i = end
        else:
            i += 1
    out.extend(_stripped(text, start, n))
    return out


def _stripped(text: str, start: int, end: int) -> list[tuple[int, int]]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return [(start, end)] if end > start else []


def _ends_sentence(text: str, i: int) -> bool:
    """Whether the ``.`` at ``i`` ends a sentence."""
    before = text[i - 1] if i > 0 else ""
    after = text[i + 1] if i + 1 < len(text) else ""
    if after == ".":
        return True  # an ellipsis "..." ends where its dots end
    if before.isdigit() and after.isdigit():
        return False  # 3.5
    if after and not (after.isspace() or after in _CLOSERS or _is_han(after)):
        return False  # e.g. "example.com", "U.S.A"
    word = _word_before(text, i).lower()
    if len(word) == 1 and text[i - 1].isupper():
        return False  # an initial: J. Smith
    if word in NUMBER_ABBREVIATIONS:
        return not text[i + 1 :].lstrip()[:1].isdigit()
    return word not in ABBREVIATIONS


def _word_before(text: str, i: int) -> str:
    j = i
    while j > 0 and (text[j - 1].isalpha() or (text[j - 1] == "." and j > 1 and text[j - 2].isalpha())):
        j -= 1
    return text[j:i]


def _is_han(ch: str) -> bool:
    return "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff"


def _cut(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int, str]]:
    """A sentence longer than ``max_chars``, cut into pieces that are not."""
    out: list[tuple[int, int, str]] = []
    while end - start > max_chars:
        window = text[start : start + max_chars]
        at = max(window.rfind(c) for c in _CLAUSES)
        if at >= 1:
            cut, resume, pause = at + 1, at + 1, "clause"
        elif text.rfind(" ", start + 1, start + max_chars + 1) >= 0:
            space = text.rfind(" ", start + 1, start + max_chars + 1) - start  # a space right after the window too
            cut, resume, pause = space, space + 1, "clause"
        else:
            cut = resume = _hard_cut(window)
            pause = "none"
        out.extend((a, b, pause) for a, b in _stripped(text, start, start + cut))
        start = start + resume
        while start < end and text[start].isspace():
            start += 1
    out.extend((a, b, "sentence") for a, b in _stripped(text, start, end))
    return out


def _hard_cut(window: str) -> int:
    """Where to cut a window with no clause mark or space: before a run of Latin letters
    or digits that reaches the end, unless that run is the whole window."""
    cut = len(window)
    while cut > 1 and window[cut - 1].isascii() and window[cut - 1].isalnum():
        cut -= 1
    return cut if cut > 1 else len(window)


def _word_chars(text: str) -> int:
    return sum(1 for ch in text if ch.isalnum())


def _merge_short(text: str, spans: list[tuple[int, int, str]], max_chars: int) -> list[tuple[int, int, str]]:
    """Short pieces joined to the segment before them (the first one to the one after),
    never beyond ``max_chars``: a run of short pieces ("a. " * 333) becomes segments of
    up to ``max_chars`` each, not one segment of all of them."""
    merged: list[tuple[int, int, str]] = []
    for a, b, pause in spans:
        if merged and _word_chars(text[a:b]) < _MIN_WORD_CHARS and b - merged[-1][0] <= max_chars:
            merged[-1] = (merged[-1][0], b, pause)
        else:
            merged.append((a, b, pause))
    if (
        len(merged) > 1
        and _word_chars(text[merged[0][0] : merged[0][1]]) < _MIN_WORD_CHARS
        and merged[1][1] - merged[0][0] <= max_chars
    ):
        merged[:2] = [(merged[0][0], merged[1][1], merged[1][2])]
    return merged
