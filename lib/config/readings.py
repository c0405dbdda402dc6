"""The readings section of the configuration (``readings:``), with its checks beside its
fields. Re-exported by :mod:`lib.config`, which reads it with the other sections;
:mod:`lib.readings` uses it.

The operator's pronunciation lexicon is a JSON file (``lexicon.json`` in the working
directory by default, beside ``hot_phrases.json``): a missing file is an empty lexicon,
a bad one stops the start with a message naming its line, and edits made through the
API are written back to it atomically (mode 0600). docs/readings.md has the format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lib.config.load import require
from lib.text.lexicon import Lexicon

__all__ = ["MAX_LEXICON_LIMIT", "ReadingsConfig", "lexicon_path", "load_lexicon"]

#: Highest ``readings.max_entries`` accepted: every entry is a term of the scan that
#: runs on each key (a larger automaton costs memory, not time per text).
MAX_LEXICON_LIMIT = 100_000


@dataclass(frozen=True)
class ReadingsConfig:
    """The text front end and the operator's lexicon (``readings:``)."""

    lexicon: str | None = "lexicon.json"
    """The operator's lexicon file, relative to the working directory; a missing file
    is an empty lexicon; null keeps the lexicon in memory only (and in Redis with a
    shared tier): edits are lost at a restart."""
    max_entries: int = 10_000
    """Most entries the operator's lexicon holds; adding one more is refused (422)."""

    def __post_init__(self) -> None:
        require(
            (
                self.lexicon is None or bool(self.lexicon.strip()),
                "readings.lexicon: give a file name (e.g. lexicon.json) or null, not ''",
            ),
            (
                1 <= self.max_entries <= MAX_LEXICON_LIMIT,
                f"readings.max_entries: must be 1 to {MAX_LEXICON_LIMIT}, got {self.max_entries}",
            ),
        )


def lexicon_path(section: ReadingsConfig) -> Path | None:
    """The operator's lexicon file (``readings.lexicon``), or None."""
    return Path(section.lexicon) if section.lexicon is not None else None


def load_lexicon(section: ReadingsConfig) -> Lexicon:
    """The operator's lexicon from its file (empty if there is none). A bad file raises
    :class:`lib.text.lexicon.LexiconFileError` (a configuration error) naming its line;
    ``python -m lib.cli prepare`` (``run.sh``) and the service's start call it."""
    path, limit = lexicon_path(section), section.max_entries
    return Lexicon.load(path, limit=limit) if path is not None else Lexicon(limit=limit)
