"""The text front end: normalisation, reading, lexicon (issue 27).

:mod:`lib.text.tokens` holds the interface every engine receives (:class:`Reading`).
"""

from lib.text.tokens import KINDS, PAUSES, SOURCES, Reading, Token

__all__ = ["KINDS", "PAUSES", "SOURCES", "Reading", "Token"]
