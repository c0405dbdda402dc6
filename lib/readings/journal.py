"""What changed in the lexicon, remembered: for the dashboard (how many cached entries a
change made stale) and for the preload (which phrases it makes again because of one).

The journal keeps the last-known lexicon and the most recent changes in
``<cache.dir>/lexicon-changes.json`` (0600, written atomically), so that it also sees
what changed while the service was stopped (the file edited by hand, another replica's
edit found in Redis at the start): the lexicon a service starts with is compared with
the last-known one, and every difference is a change.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from lib.core.reports import LexiconChange
from lib.text.lexicon import LexiconEntry

__all__ = ["Change", "Journal", "diff"]

_LOGGER = logging.getLogger(__name__)

#: Changes kept (the oldest go first).
KEEP = 200

Scope = tuple[str, str | None]
"""An entry's term and voice (None: global)."""


@dataclass(frozen=True)
class Change:
    """One entry added, replaced or deleted."""

    term: str
    voice: str | None
    before: str | None
    """The reading before (None: there was no entry)."""
    after: str | None
    """The reading after (None: the entry was deleted)."""
    at: float
    origin: str
    """``here`` (an edit on this service), ``replica`` (another replica's, through Redis)
    or ``start`` (found at the start: the file edited while stopped, or Redis's lexicon)."""
    stale: int | None = None
    """Cached entries the change made stale (None: not counted, or texts not stored)."""

    @property
    def action(self) -> Literal["added", "replaced", "deleted"]:
        return "added" if self.before is None else "deleted" if self.after is None else "replaced"

    def to_json(self) -> LexiconChange:
        # Every field in its order (what dataclasses.asdict gave), then the action.
        return {
            "term": self.term, "voice": self.voice, "before": self.before, "after": self.after, "at": self.at,
            "origin": self.origin, "stale": self.stale, "action": self.action,
        }  # fmt: skip


def diff(
    old: Iterable[LexiconEntry], new: Iterable[LexiconEntry], origin: str, at: float | None = None
) -> list[Change]:
    """The changes that make ``old`` into ``new``."""
    when = time.time() if at is None else at
    before = {(e.term, e.voice): e.reading for e in old}
    after = {(e.term, e.voice): e.reading for e in new}
    out = []
    for scope in sorted(before.keys() | after.keys(), key=lambda s: (s[0], s[1] or "")):
        if before.get(scope) != after.get(scope):
            out.append(Change(scope[0], scope[1], before.get(scope), after.get(scope), when, origin))
    return out


class Journal:
    """The last-known lexicon and the recent changes; thread-safe."""

    def __init__(self, path: Path | None, current: Sequence[LexiconEntry]) -> None:
        """``path``: the journal file (None: in memory only). ``current``: the lexicon
        the service starts with; its differences from the last-known one are recorded."""
        self.path = path
        self._lock = threading.Lock()
        self._changes: list[Change] = []
        self.found: list[Change] = []
        """The changes found at the start (the lexicon differs from the last-known one)."""
        known: list[LexiconEntry] | None = None
        if path is not None:
            known = self._load(path)
        self._known = list(current)
        if known is not None:
            self.found = diff(known, current, "start")
            if self.found:
                _LOGGER.info("the lexicon changed while the service was stopped: %d entries", len(self.found))
            self.record(self.found, current)
        elif path is not None:
            self._save()

    def _load(self, path: Path) -> list[LexiconEntry] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = [LexiconEntry(str(e["term"]), str(e["reading"]), e.get("voice")) for e in data["entries"]]
            self._changes = [Change(**{k: v for k, v in c.items() if k != "action"}) for c in data["changes"]]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            _LOGGER.warning("the lexicon journal %s is unreadable (%s); starting a new one", path, exc)
            return None
        return entries

    def record(self, changes: Sequence[Change], current: Sequence[LexiconEntry]) -> None:
        """Remember ``changes`` and that the lexicon is now ``current``."""
        with self._lock:
            self._changes = (self._changes + list(changes))[-KEEP:]
            self._known = list(current)
        if changes:
            self._save()

    def counted(self, change: Change, stale: int | None) -> Change:
        """Record the stale count of ``change`` (counted after it was recorded)."""
        done = replace(change, stale=stale)
        with self._lock:
            self._changes = [done if c == change else c for c in self._changes]
        self._save()
        return done

    def recent(self, n: int = 10) -> list[Change]:
        """The last ``n`` changes, newest first."""
        with self._lock:
            return list(reversed(self._changes[-n:]))

    def affecting(self, text: str) -> list[Change]:
        """The remembered changes whose term occurs in ``text``, newest first."""
        with self._lock:
            return [c for c in reversed(self._changes) if c.term in text]

    def _save(self) -> None:
        if self.path is None:
            return
        with self._lock:
            doc = {
                "entries": [e.to_json() for e in self._known],
                "changes": [c.to_json() for c in self._changes],
            }
        data = json.dumps(doc, ensure_ascii=False, indent=0).encode("utf-8")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=".lexicon-changes-", dir=self.path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.chmod(tmp, 0o600)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:  # a record for the dashboard and the preload: never fails an edit
            _LOGGER.warning("cannot write the lexicon journal %s: %s", self.path, exc)
