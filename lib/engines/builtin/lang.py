"""Split text into sentences and into runs of one script, each with an espeak language.

espeak-ng reads one language per call, so "请到3号窗口办理 VIP 业务" is spoken as three
runs: ``cmn`` "请到3号窗口办理", ``en-us`` "VIP", ``cmn`` "业务". Digits, spaces and
punctuation have no script of their own; they join the run they touch (the preceding
one, or the following one at the start), so "3号" is read in Chinese and "window 3" in
English.

How Han text is assigned in ``auto``: Mandarin (``cmn``) by default, because most Han
text is Mandarin and written Cantonese is hard to tell from it by characters alone. A
request is read as Cantonese (``yue``) only if it contains one of the characters of
written Cantonese that Mandarin does not use (嘅 咗 唔 佢 冇 嘢 啲 喺 嚟 睇 咁 嗰 乜 啱
攞 揾 噉 哋 嬲 冚); then all its Han runs are ``yue``. The engine interface has no
per-request language, so ``builtin.language`` (``cmn``, ``yue``, ``en-us``) in the
configuration forces one language for Han runs (``en-us`` forces every run).
"""

from __future__ import annotations

import logging
import re
import unicodedata

__all__ = ["LANGUAGES", "has_cantonese", "speakable", "split_runs", "split_sentences"]

_LOGGER = logging.getLogger(__name__)

#: Values of ``builtin.language``.
LANGUAGES = ("auto", "cmn", "yue", "en-us")

_CANTONESE_ONLY = frozenset("嘅咗唔佢冇嘢啲喺嚟睇咁嗰乜啱攞揾噉哋嬲冚")

# A sentence ends after terminal punctuation (and any closing quotes/brackets).
_SENTENCE_END = re.compile(r"[^。！？!?；;…]*(?:[。！？!?；;…]+[”’」』）)\"']*|$)")
_ASCII_STOP = re.compile(r"(?<=[a-zA-Z0-9][.])\s+")


def _script(ch: str) -> str | None:
    """``"han"``, ``"latin"`` or ``None`` for characters that belong to no script."""
    if "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\U00020000" <= ch <= "\U0003134f":
        return "han"
    if ch.isalpha() and unicodedata.name(ch, "").startswith("LATIN"):
        return "latin"
    return None


def speakable(text: str) -> bool:
    """Whether ``text`` has anything espeak can read here: a Latin or Han letter, or
    an ASCII digit. Punctuation, emoji and other scripts alone are not speech."""
    return any(ch.isalnum() and (ch.isascii() or _script(ch) is not None) for ch in text)


def has_cantonese(text: str) -> bool:
    """Whether ``text`` has a character of written Cantonese that Mandarin does not use."""
    return any(ch in _CANTONESE_ONLY for ch in text)


def _han_language(text: str, forced: str) -> str:
    if forced != "auto":
        return forced
    return "yue" if has_cantonese(text) else "cmn"


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` with their punctuation, no empty ones, in order.

    Very short pieces are merged into their predecessor so that each one carries enough
    voiced speech for a stable pitch measurement."""
    pieces: list[str] = []
    for match in _SENTENCE_END.finditer(text):
        piece = match.group(0)
        if piece:
            pieces.extend(p for p in _ASCII_STOP.split(piece) if p)
    merged: list[str] = []
    for piece in pieces:
        if merged and (sum(1 for ch in piece if _script(ch)) < 4 or not piece.strip()):
            merged[-1] += piece
        else:
            merged.append(piece)
    if len(merged) > 1 and sum(1 for ch in merged[0] if _script(ch)) < 4:
        merged[1] = merged[0] + merged[1]
        del merged[0]
    return [m.strip() for m in merged if m.strip()]


def split_runs(text: str, language: str = "auto") -> list[tuple[str, str]]:
    """``[(espeak_language, text), ...]`` covering ``text`` in order.

    ``language`` is ``builtin.language``: ``auto`` picks per run of script."""
    if language == "en-us":
        return [("en-us", text)] if text.strip() else []
    han = _han_language(text, language)
    runs: list[list[str]] = []  # [script, text]
    pending = ""
    for ch in text:
        script = _script(ch)
        if script is None:
            if runs:
                runs[-1][1] += ch
            else:
                pending += ch
            continue
        if runs and runs[-1][0] == script:
            runs[-1][1] += ch
        elif runs and _script_free_tail(runs[-1][1]) and script == "han":
            # Digits right before Han text ("VIP 3号") are read with the Han text.
            head, tail = _split_tail(runs[-1][1])
            runs[-1][1] = head
            runs.append([script, tail + ch])
        else:
            runs.append([script, pending + ch])
            pending = ""
    if not runs:
        # Only digits and punctuation: read them in the default language.
        return [(han, text)] if text.strip() else []
    out: list[tuple[str, str]] = []
    for script, chunk in runs:
        lang = han if script == "han" else "en-us"
        if chunk.strip():
            if out and out[-1][0] == lang:
                out[-1] = (lang, out[-1][1] + chunk)
            else:
                out.append((lang, chunk))
    return out


_TAIL_DIGITS = re.compile(r"[0-9０-９]+$")


def _script_free_tail(chunk: str) -> bool:
    return bool(_TAIL_DIGITS.search(chunk)) and bool(_TAIL_DIGITS.sub("", chunk).strip())


def _split_tail(chunk: str) -> tuple[str, str]:
    match = _TAIL_DIGITS.search(chunk)
    if match is None:
        return chunk, ""
    return chunk[: match.start()], match.group(0)
