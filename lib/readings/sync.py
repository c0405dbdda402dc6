"""The lexicon shared by the replicas of a shared tier (Redis), like saved voices.

Redis holds the lexicon every replica uses (:mod:`lib.shared.lexicon`) while it answers:

- at the start a replica adopts Redis's lexicon (and writes it to its own file), or, when
  Redis has none yet, publishes its file's;
- an edit goes to Redis first (one script: the size limit holds across replicas) and is
  refused while Redis cannot be reached (503, nothing changed), since the others would
  never see it;
- every replica polls the lexicon's revision (one GET every :data:`POLL_EVERY` seconds)
  and reads the whole lexicon again when it moved: another replica's edit is here within
  seconds. While Redis is down the last lexicon read keeps serving.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from lib.core.logtext import cut_text
from lib.errors import StoreUnavailableError
from lib.text.lexicon import LexiconEntry, LexiconError, validate_entry

__all__ = ["POLL_EVERY", "LexiconSync", "SharedLexicon"]

_LOGGER = logging.getLogger(__name__)

#: Seconds between two polls of the lexicon's revision.
POLL_EVERY = 1.0

Triple = tuple[str, str | None, str]
"""An entry as Redis keeps it: term, voice, reading."""

_DOWN = (
    "the shared tier (Redis) cannot be reached, so the other replicas would not get this lexicon change; "
    "nothing was changed: try again once it is back"
)


class SharedLexicon(Protocol):
    """The shared tier's lexicon keys (:class:`lib.shared.lexicon.LexiconKeys`)."""

    def lexicon_rev(self) -> int | None: ...

    def lexicon_state(self) -> tuple[int, list[Triple]] | None: ...

    def lexicon_publish(self, entries: list[Triple]) -> bool | None: ...

    def lexicon_put(self, term: str, voice: str | None, reading: str, limit: int) -> int | None: ...

    def lexicon_delete(self, term: str, voice: str | None) -> int | None: ...


class LexiconSync:
    """Keeps this replica's lexicon equal to Redis's. ``apply`` receives every lexicon
    another replica made (the whole list); ``local`` gives this replica's entries.
    ``lock``: the lock the owner edits its lexicon under (one lock for both, always
    taken first, so a poll and an edit never wait for each other in opposite orders)."""

    def __init__(
        self, shared: SharedLexicon, local: Callable[[], Sequence[LexiconEntry]],
        apply: Callable[[list[LexiconEntry]], None], lock: threading.RLock, *, poll_every: float = POLL_EVERY,
    ) -> None:  # fmt: skip
        self.shared = shared
        self._local = local
        self._apply = apply
        self._rev: int | None = None
        """The revision this replica's lexicon is at (None: not synchronised yet)."""
        self._lock = lock
        self._stop = threading.Event()
        self._poll_every = poll_every
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Synchronise now (adopt or publish), then follow in a thread."""
        self.poll()
        self._thread = threading.Thread(target=self._loop, name="lexicon-sync", daemon=True)
        self._thread.start()

    def poll(self) -> bool:
        """Bring the local lexicon up to Redis's revision; False when Redis cannot answer."""
        with self._lock:
            rev = self.shared.lexicon_rev()
            if rev is None:
                return False
            if rev == 0:  # nothing published (a new Redis, or one flushed): ours becomes the lexicon
                if self.shared.lexicon_publish(_triples(self._local())) is None:
                    return False
            elif rev == self._rev:
                return True
            state = self.shared.lexicon_state()
            if state is None:
                return False
            rev, triples = state
            if rev != self._rev:
                self._apply(_entries(triples))
                self._rev = rev
            return True

    def put(self, entry: LexiconEntry, limit: int) -> None:
        """Add or replace ``entry`` in Redis (before this replica applies it). Raises
        :class:`StoreUnavailableError` while Redis cannot be reached, :class:`LexiconError`
        when the shared lexicon is full."""
        self._edit(lambda: self.shared.lexicon_put(entry.term, entry.voice, entry.reading, limit), entry.term, limit)

    def delete(self, term: str, voice: str | None) -> bool:
        """Delete the entry in Redis; whether it was there."""
        return self._edit(lambda: self.shared.lexicon_delete(term, voice), term, 0) > 0

    def _edit(self, call: Callable[[], int | None], term: str, limit: int) -> int:
        if not self.poll():  # also publishes a lexicon where Redis has none
            raise StoreUnavailableError(_DOWN)
        with self._lock:
            rev = call()
            if rev == -2 and self.shared.lexicon_publish(_triples(self._local())) is not None:
                rev = call()  # flushed between the poll and the edit
            if rev is None or rev == -2:
                raise StoreUnavailableError(_DOWN)
            if rev == -1:
                raise LexiconError(
                    f"lexicon entry {term!r}: the lexicon is full ({limit} entries across the replicas); "
                    "delete some first"
                )
            if rev > 0 and self._rev is not None and rev == self._rev + 1:
                self._rev = rev  # our own edit, applied by the caller: nothing to read back
            return rev

    def _loop(self) -> None:
        while not self._stop.wait(self._poll_every):
            try:
                self.poll()
            except Exception as exc:  # a bad apply must not end the thread
                _LOGGER.warning("cannot follow the shared lexicon: %s", exc)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _triples(entries: Sequence[LexiconEntry]) -> list[Triple]:
    return [(e.term, e.voice, e.reading) for e in entries]


def _entries(triples: list[Triple]) -> list[LexiconEntry]:
    out = []
    for term, voice, reading in triples:
        try:
            out.append(validate_entry(term, reading, voice))
        except LexiconError as exc:  # written by another version, or by hand: left out, said once
            _LOGGER.warning("shared lexicon entry %r ignored: %s", cut_text(term), exc)
    return out
