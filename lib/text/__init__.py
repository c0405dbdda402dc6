"""The text front end: normalisation, reading, lexicon (issue 27).

:mod:`lib.text.tokens` holds the interface every engine receives (:class:`Reading`);
:class:`lib.text.frontend.FrontEnd` makes it. :func:`read` reads with a default front
end that has the shipped lexicon only. Importing this package loads no model: jieba
and pypinyin load on the first read.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from lib.text.tokens import KINDS, PAUSES, SOURCES, Reading, Token

if TYPE_CHECKING:
    from lib.text.frontend import FrontEnd

__all__ = ["KINDS", "PAUSES", "SOURCES", "Reading", "Token", "default_front_end", "read"]

_DEFAULT: FrontEnd | None = None
_DEFAULT_LOCK = threading.Lock()


def default_front_end() -> FrontEnd:
    """The process's front end with the shipped lexicon only (no cache directory:
    jieba builds its dictionary in memory)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            from lib.text.frontend import FrontEnd

            _DEFAULT = FrontEnd()
        return _DEFAULT


def read(text: str, *, voice: str | None = None, language: str | None = None) -> Reading:
    """The reading of ``text`` (see :meth:`lib.text.frontend.FrontEnd.read`)."""
    return default_front_end().read(text, voice=voice, language=language)
