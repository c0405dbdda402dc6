"""Slot patterns, matched by RE2: time linear in the text, whatever the pattern.

A template's slot pattern is a regular expression written by whoever wrote the phrase
list, and :meth:`lib.compose.templatebook.TemplateBook.match` runs every template's
pattern on every miss. Python's ``re`` backtracks: ``(a+)+b`` against 30 ``a``s takes
minutes, holding the GIL, so one pattern and one request stopped the whole process
(``/healthz`` too). RE2 (``google-re2`` on PyPI, pinned in requirements.txt) is an
automaton without backtracking, so a match costs time proportional to the text for
*every* pattern; a time limit would still let each miss burn that limit, and a
restricted pattern language would still need a proof that each allowed form cannot
backtrack. What RE2 cannot do in linear time (back-references, look-arounds) it refuses
to compile, and a template using them is refused at load with a message saying so.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Protocol

__all__ = ["CompiledPattern", "PatternError", "compile_pattern"]

_LOGGER = logging.getLogger(__name__)

#: Longest pattern text accepted (RE2 also bounds the memory of a compiled pattern).
MAX_PATTERN_CHARS = 1000
_MAX_MEM = 8 << 20


class PatternError(ValueError):
    """The pattern cannot be compiled by RE2; the message says why."""


class PatternMatch(Protocol):
    def group(self, name: str) -> str: ...


class CompiledPattern(Protocol):
    def fullmatch(self, text: str) -> PatternMatch | None: ...


def compile_pattern(pattern: str, *, ignore_case: bool = False) -> CompiledPattern:
    """RE2's compiled ``pattern`` (Python's syntax for named groups, ``(?P<name>...)``,
    works). Raises :class:`PatternError` for what RE2 does not accept."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"is {len(pattern)} characters long, over {MAX_PATTERN_CHARS}")
    re2: Any = importlib.import_module("re2")
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.max_mem = _MAX_MEM
    options.case_sensitive = not ignore_case
    try:
        compiled: CompiledPattern = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(
            f"is not a regular expression RE2 accepts ({reason}); back-references and look-arounds are not "
            "supported: they cannot be matched in time linear in the text"
        ) from None
    return compiled
