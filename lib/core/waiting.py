"""Who still waits for a piece of work: a request's caller, or everyone who shares it.

A miss of a long text is many engine calls (one per sentence). When the client that asked
for it hangs up, nobody waits for the rest any more, and on a costly engine (the Kokoro
base: about a minute of CPU for 1,000 characters) the sentences not yet started must not
be made for nobody. The HTTP boundary (:mod:`lib.api.attended`) gives each synthesising
request a :class:`Caller` and marks it gone when the client disconnects; the single
flights (:mod:`lib.cache.singleflight`) join the waiters of every request that shares a
key into one :class:`Waiters`; the engine watchdog refuses to start a call whose waiters
are all gone (:class:`lib.errors.AbandonedError`). The call already inside the engine is
never stopped: it ends, and is stored, as before.

Work started with no caller (a preload, the command line, a background refinement, a
test) is waited for by :data:`ANYONE`: it is never dropped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol

__all__ = ["ANYONE", "Caller", "Interest", "Waiters", "abandoned", "waited_by", "waiting"]


class Interest(Protocol):
    """Whether anyone still waits for the work run under it."""

    def alive(self) -> bool: ...

    def reason(self) -> str:
        """Why nobody waits any more (``disconnected``); empty while someone does."""
        ...


class _Anyone:
    """Somebody always waits: work nobody asked to watch."""

    def alive(self) -> bool:
        return True

    def reason(self) -> str:
        return ""


ANYONE: Interest = _Anyone()


class Caller:
    """One request's caller: waits until :meth:`leave`. Thread-safe (a flag)."""

    def __init__(self) -> None:
        self._gone = ""

    def alive(self) -> bool:
        return not self._gone

    def reason(self) -> str:
        return self._gone

    def leave(self, reason: str = "disconnected") -> None:
        """The caller no longer waits (its client disconnected, or its answer ended)."""
        if not self._gone:
            self._gone = reason


class Waiters:
    """Everyone who waits for one key's work: alive while any of them is."""

    def __init__(self, first: Interest) -> None:
        self._members = [first]
        self._lock = threading.Lock()

    def join(self, interest: Interest) -> None:
        with self._lock:
            if interest not in self._members:
                self._members.append(interest)

    def __len__(self) -> int:
        with self._lock:
            return len(self._members)

    def alive(self) -> bool:
        with self._lock:
            members = list(self._members)
        return any(m.alive() for m in members)

    def reason(self) -> str:
        if self.alive():
            return ""
        with self._lock:
            return self._members[0].reason()


_WAITING: ContextVar[Interest] = ContextVar("waiting", default=ANYONE)


def waiting() -> Interest:
    """Who waits for the work this thread (or task) runs now."""
    return _WAITING.get()


def abandoned() -> str:
    """Why nobody waits for the work run now; empty while someone does."""
    return _WAITING.get().reason()


@contextlib.contextmanager
def waited_by(interest: Interest) -> Iterator[None]:
    """Run the block's work for ``interest`` (copied into worker threads with the context)."""
    token = _WAITING.set(interest)
    try:
        yield
    finally:
        _WAITING.reset(token)
