"""The approvals of one service: in memory for the hit path, on disk, shared through Redis.

:class:`ApprovalBook` holds phrase id -> :class:`lib.takes.records.Approval` in a dict
that is replaced whole on every change, so the hit path reads it with one dict lookup,
no lock. Each change is written to ``<cache.dir>/takes/approvals.json`` (it survives
restarts), and each approved take's packed entry is copied to
``<cache.dir>/takes/<key>.take`` (0600, in the 0700 folder), outside the size-limited
audio store, so no eviction, ``evict`` of a model version or ``clear`` of the results can
lose it: the take goes back into the store from its copy (:meth:`restore_missing`, after
those operations, and on a lookup that finds it missing). The copies count in the cache
folder's size like the other side stores.

In the store the approved keys are the pinned list :data:`lib.cache.policy.APPROVED_PIN`
(``cost-aware``: never victims; they count toward ``cache.pin_fraction``, with a warning
past it).

With a shared tier, Redis holds every replica's approvals (:mod:`lib.shared.takes`): a
change is written there too, and every replica polls the revision (one GET every
:data:`POLL_EVERY` seconds) and adopts Redis's approvals, fetching the audio of a take it
has no copy of. At the start a replica adopts Redis's approvals, or publishes its own
when Redis has none.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from pathlib import Path
from typing import Protocol

from lib.cache.diskutil import ensure_private_dir
from lib.cache.entry import CachedAudio, CorruptEntryError, unpack
from lib.cache.keys import KEY_RE
from lib.cache.policy import APPROVED_PIN
from lib.core.atomicfile import write_private
from lib.takes.records import Approval, ApprovalFile

__all__ = ["POLL_EVERY", "ApprovalBook", "SharedTakes", "TakeStore"]

_LOGGER = logging.getLogger(__name__)

POLL_EVERY = 1.0
"""Seconds between two polls of the shared approvals' revision."""


class SharedTakes(Protocol):
    """The shared tier's approval keys (:class:`lib.shared.takes.TakeKeys`)."""

    def takes_rev(self) -> int | None: ...

    def takes_state(self) -> tuple[int, dict[str, str]] | None: ...

    def takes_put(self, phrase: str, record: str, key: str, blob: bytes, old_key: str | None = None) -> int | None: ...

    def takes_delete(self, phrases: dict[str, str]) -> int | None: ...

    def takes_audio(self, key: str) -> bytes | None: ...


class TakeStore(Protocol):
    """What the book needs of the disk tier (:class:`lib.cache.store.AudioStore`)."""

    def contains(self, key: str) -> bool: ...

    def put_blob(self, key: str, blob: bytes, *, tag: str, ttl: float | None, origin: str = "user") -> bool: ...

    def pin(self, name: str, keys: list[str]) -> str | None: ...


class ApprovalBook:
    """Approved takes by phrase (see the module). ``pin_budget``: bytes the pinned lists
    may hold (``cache.pin_fraction`` of the limit), for the warning past it; None when
    the eviction policy has no pins."""

    def __init__(
        self, directory: Path, store: TakeStore, shared: SharedTakes | None = None, *, pin_budget: int | None = None,
        poll_every: float = POLL_EVERY,
    ) -> None:  # fmt: skip
        self.directory = directory
        self.store = store
        self.shared = shared
        self.pin_budget = pin_budget
        self._file = ApprovalFile(directory)
        self._lock = threading.RLock()
        self._approved: dict[str, Approval] = self._file.load()
        self._by_key: dict[str, Approval] = {a.key: a for a in self._approved.values()}
        self._rev: int | None = None
        self._pinned = False
        """Whether this book has pinned keys in the store (an empty list unpins them)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._poll_every = poll_every
        if shared is not None:
            self.poll()
            self._thread = threading.Thread(target=self._loop, name="takes-sync", daemon=True)
            self._thread.start()
        self._pin()

    # -- reading (the hit path: one dict lookup) ----------------------------------------

    def get(self, phrase: str) -> Approval | None:
        """The phrase's approval, or None."""
        return self._approved.get(phrase)

    def by_key(self, key: str) -> Approval | None:
        return self._by_key.get(key)

    def approvals(self) -> list[Approval]:
        return sorted(self._approved.values(), key=lambda a: a.at)

    def __len__(self) -> int:
        return len(self._approved)

    # -- changes ------------------------------------------------------------------------

    def approve(self, approval: Approval, blob: bytes) -> Approval | None:
        """Make ``approval`` its phrase's approved take (``blob``: its packed entry, with
        no expiry); returns the approval it replaces, if any."""
        with self._lock:
            self._write_copy(approval.key, blob)
            old = self._approved.get(approval.phrase)
            self._set({**self._approved, approval.phrase: approval})
            if old is not None and old.key != approval.key and old.key not in self._by_key:
                self._drop_copy(old.key)
            if self.shared is not None:
                rev = self.shared.takes_put(
                    approval.phrase, json.dumps(approval.to_json(), ensure_ascii=False), approval.key, blob,
                    old.key if old is not None else None,
                )  # fmt: skip
                self._followed(rev)
        return old

    def withdraw(self, key: str) -> Approval | None:
        """Withdraw the approval whose take is ``key``; the withdrawn one, or None."""
        with self._lock:
            found = self._by_key.get(key)
            if found is None:
                return None
            self._set({p: a for p, a in self._approved.items() if p != found.phrase})
            self._drop_copy(key)
            if self.shared is not None:
                self._followed(self.shared.takes_delete({found.phrase: key}))
        return found

    def drop_all(self) -> int:
        """Withdraw every approval (an admin clear that asked to drop them)."""
        with self._lock:
            gone = dict(self._approved)
            self._set({})
            for approval in gone.values():
                self._drop_copy(approval.key)
            if self.shared is not None and gone:
                self._followed(self.shared.takes_delete({p: a.key for p, a in gone.items()}))
        return len(gone)

    def _followed(self, rev: int | None) -> None:
        """After this replica's own change: no need to read it back, unless another came between."""
        if rev is None:
            _LOGGER.warning("the shared tier is down: this approval change reaches the other replicas only later")
        elif self._rev is not None and rev == self._rev + 1:
            self._rev = rev

    def _set(self, approvals: dict[str, Approval]) -> None:
        """Replace the approvals (lock held): memory at once, then the file and the pins."""
        self._approved = approvals
        self._by_key = {a.key: a for a in approvals.values()}
        try:
            self._file.save(approvals)
        except OSError as exc:
            where = self._file.path
            _LOGGER.error("cannot write the approvals to %s: %s; they last until the service stops", where, exc)
        self._pin()

    # -- the audio of approved takes -----------------------------------------------------

    def blob(self, key: str) -> bytes | None:
        """The approved take's packed entry: the local copy, else Redis's (then copied)."""
        if not KEY_RE.match(key):
            return None
        with contextlib.suppress(OSError):
            return self._copy_path(key).read_bytes()
        if self.shared is not None:
            blob = self.shared.takes_audio(key)
            if blob is not None:
                self._write_copy(key, blob)
                return blob
        return None

    def entry(self, key: str) -> CachedAudio | None:
        """The approved take's entry from its copy (verified), or None."""
        blob = self.blob(key)
        if blob is None:
            return None
        try:
            return unpack(blob, key)
        except CorruptEntryError as exc:
            _LOGGER.error("the copy of approved take %s is damaged (%s); the phrase is served unapproved", key, exc)
            return None

    def restore_missing(self, tag: str | None = None) -> int:
        """Put back into the store every approved take that is not there (after a clear,
        an evict, an eviction under another policy); ``tag``: only those with it
        (``engine:model_version`` or ``voice:<fingerprint>``).
        Returns how many approved takes that concerned (the ones kept)."""
        kept = 0
        for approval in list(self._approved.values()):
            if tag is not None and tag not in (approval.tag, f"voice:{approval.voice_id}"):
                continue
            kept += 1
            if self.store.contains(approval.key):
                continue
            blob = self.blob(approval.key)
            if blob is None:
                _LOGGER.error("approved take %s has no copy left; its phrase is served unapproved", approval.key)
                continue
            self.store.put_blob(approval.key, blob, tag=approval.tag, ttl=None)
        self._pin()
        return kept

    def _copy_path(self, key: str) -> Path:
        return self.directory / f"{key}.take"

    def _write_copy(self, key: str, blob: bytes) -> None:
        ensure_private_dir(self.directory)
        write_private(self._copy_path(key), blob)

    def _drop_copy(self, key: str) -> None:
        with contextlib.suppress(OSError):
            self._copy_path(key).unlink()

    def _pin(self) -> None:
        keys = sorted(self._by_key)
        if not keys and not self._pinned:
            return  # nothing approved yet: the store's policy is not loaded for nothing at the start
        digest = self.store.pin(APPROVED_PIN, keys)
        self._pinned = bool(keys)
        if not keys:
            return
        held = 0
        for key in keys:
            with contextlib.suppress(OSError):
                held += self._copy_path(key).stat().st_size
        if self.pin_budget is not None and held > self.pin_budget:
            _LOGGER.warning(
                "approved takes hold %d bytes, over the pin budget (cache.pin_fraction: %d bytes); they stay, "
                "other pinned lists give way", held, self.pin_budget,
            )  # fmt: skip
        if digest is None:
            _LOGGER.debug("the eviction policy has no pins; approved takes are put back from their copies")

    # -- sharing ---------------------------------------------------------------------------

    def poll(self) -> bool:
        """Adopt Redis's approvals if they changed (publish ours where Redis has none);
        False when Redis cannot answer."""
        shared = self.shared
        if shared is None:
            return True
        with self._lock:
            rev = shared.takes_rev()
            if rev is None:
                return False
            if rev == 0:
                if not self._approved:
                    self._rev = 0
                    return True
                self._publish(shared)
                rev = shared.takes_rev()
                if rev is None:
                    return False
            if rev == self._rev:
                return True
            state = shared.takes_state()
            if state is None:
                return False
            rev, records = state
            adopted: dict[str, Approval] = {}
            for phrase, record in records.items():
                try:
                    approval = Approval.from_json(json.loads(record))
                except ValueError:
                    approval = None
                if approval is None or approval.phrase != phrase:
                    _LOGGER.warning("shared approval of phrase %s ignored: not a record", phrase[:32])
                    continue
                if self.blob(approval.key) is None:
                    _LOGGER.warning("shared approval %s has no audio in Redis; not adopted", approval.key)
                    continue
                adopted[phrase] = approval
            gone = set(self._by_key) - {a.key for a in adopted.values()}
            if adopted != self._approved:
                self._set(adopted)
            for key in gone:
                self._drop_copy(key)
            self._rev = rev
            return True

    def _publish(self, shared: SharedTakes) -> None:
        for approval in self._approved.values():
            blob = self.blob(approval.key)
            if blob is not None:
                record = json.dumps(approval.to_json(), ensure_ascii=False)
                shared.takes_put(approval.phrase, record, approval.key, blob)

    def _loop(self) -> None:
        while not self._stop.wait(self._poll_every):
            try:
                self.poll()
            except Exception as exc:  # a bad record must not end the thread
                _LOGGER.warning("cannot follow the shared approvals: %s", exc)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
