"""Where batch jobs and their progress are kept: the :class:`Board` interface, and
:class:`LocalBoard`, a small SQLite database in the cache directory (``<cache.dir>/batch/jobs.db``,
0600 in a 0700 folder) that outlives the process. With the Redis tier the board is
:class:`lib.batch.stream.StreamBoard` instead, shared by every replica.

An item is ``pending`` (not started), ``working`` (a worker took it), ``done`` (made or
found cached: its ``cache`` is ``MISS`` or ``HIT``), ``failed`` (its ``error`` says why)
or ``dropped`` (its job was cancelled before it started). A job is ``queued`` until its
first item is taken, ``running`` until every item is done or failed, then ``done``;
``cancelled`` once cancelled (the items at work then still finish).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from typing_extensions import TypedDict

__all__ = ["Board", "Claim", "ItemView", "JobSummary", "JobView", "LocalBoard", "Planned", "audio_url"]

#: The file of the local board, under ``<cache.dir>/batch/``.
DB_NAME = "jobs.db"


def audio_url(key: str, fmt: str) -> str:
    """Where the result of an item is fetched: ``GET /api/audio/{key}.{ext}``."""
    return f"/api/audio/{key}.{fmt}"


class ItemRecord(TypedDict):
    """An item as a board keeps it (JSON)."""

    index: int
    fields: dict[str, Any]
    key: str
    url: str
    error: str | None


@dataclass(frozen=True)
class Planned:
    """One item of a new job: its request's fields and, before any work, its key and
    URL, or the error that failed it (a bad item fails alone)."""

    index: int
    fields: dict[str, Any]
    key: str
    url: str
    error: str | None = None

    def record(self) -> ItemRecord:
        """The item as a board keeps it (JSON)."""
        return {"index": self.index, "fields": self.fields, "key": self.key, "url": self.url, "error": self.error}


class ItemView(TypedDict):
    """One item in ``GET /api/batch/{id}``."""

    index: int
    key: str | None
    url: str | None
    cache: str | None
    """``HIT`` (it was cached: no engine call), ``MISS`` (made), None while pending."""
    error: str | None


class JobSummary(TypedDict):
    """A job without its items (the UI's table, ``GET /api/batch``)."""

    id: str
    status: str
    total: int
    done: int
    failed: int
    created: float


class JobView(TypedDict):
    """``GET /api/batch/{id}``."""

    id: str
    status: str
    total: int
    done: int
    failed: int
    items: list[ItemView]


@dataclass(frozen=True)
class Claim:
    """An item a worker took: its job, index and request fields; ``token``: the board's
    own handle (the stream entry's id in Redis)."""

    job: str
    index: int
    fields: dict[str, Any]
    key: str
    url: str
    token: str = ""


class Board(Protocol):
    """What the worker and the endpoints need of a board."""

    renews: bool
    """Whether a claim must be renewed while its item is made (:meth:`renew`)."""

    def create(self, job_id: str, items: list[Planned]) -> bool:
        """Store a new job; False if ``job_id`` exists (nothing changed)."""
        ...

    def summary(self, job_id: str) -> JobSummary | None: ...

    def view(self, job_id: str) -> JobView | None: ...

    def listing(self, most: int) -> list[JobSummary]:
        """The newest ``most`` jobs, newest first."""
        ...

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job (its items not started are dropped); False if unknown."""
        ...

    def unfinished(self) -> bool:
        """Whether some job has items left to make."""
        ...

    def take(self, wait: float) -> Claim | None:
        """The next item to make, or None after about ``wait`` seconds without one."""
        ...

    def renew(self, claim: Claim) -> None: ...

    def finish(self, claim: Claim, key: str, url: str, cache: str | None, error: str | None) -> None:
        """Record what became of a claimed item."""
        ...

    def release(self, claim: Claim) -> None:
        """Give a claimed item back unmade (the process is closing): it is made later."""
        ...

    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, status TEXT NOT NULL, total INTEGER NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    job TEXT NOT NULL, idx INTEGER NOT NULL, fields TEXT NOT NULL, key TEXT, url TEXT,
    cache TEXT, error TEXT, state TEXT NOT NULL, PRIMARY KEY (job, idx)
);
CREATE INDEX IF NOT EXISTS items_state ON items (state);
"""


class LocalBoard:
    """Jobs in SQLite under ``folder`` (created 0700, the database 0600). Items taken by
    a process that ended are given back when the board is opened again (a restart)."""

    renews = False

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        path = folder / DB_NAME
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # 0600 before SQLite opens it
        os.chmod(path, 0o600)
        self._db = sqlite3.connect(str(path), timeout=30.0, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._added = threading.Condition(self._lock)
        with self._lock:
            self._db.executescript(_SCHEMA)
        with self._tx() as db:  # a restart: what the last process was making is made again
            db.execute("UPDATE items SET state = 'pending' WHERE state = 'working'")

    @staticmethod
    def exists(folder: Path) -> bool:
        """Whether a board was ever kept in ``folder`` (no file is made by asking)."""
        return (folder / DB_NAME).is_file()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction, taken for writing at once (other processes wait for it)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def create(self, job_id: str, items: list[Planned]) -> bool:
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is not None:
                return False
            left = sum(1 for item in items if item.error is None)
            db.execute(
                "INSERT INTO jobs VALUES (?, ?, ?, ?)", (job_id, "queued" if left else "done", len(items), time.time())
            )
            db.executemany(
                "INSERT INTO items VALUES (?, ?, ?, ?, ?, NULL, ?, ?)",
                [
                    (job_id, i.index, json.dumps(i.fields), i.key or None, i.url or None, i.error,
                     "failed" if i.error is not None else "pending")
                    for i in items
                ],
            )  # fmt: skip
            self._added.notify_all()
        return True

    def summary(self, job_id: str) -> JobSummary | None:
        with self._lock:
            row = self._db.execute("SELECT id, status, total, created FROM jobs WHERE id = ?", (job_id,)).fetchone()
            return None if row is None else self._summary(row)

    def _summary(self, row: tuple[Any, ...]) -> JobSummary:
        counts = dict(self._db.execute("SELECT state, COUNT(*) FROM items WHERE job = ? GROUP BY state", (row[0],)))
        return {
            "id": row[0], "status": row[1], "total": row[2], "done": counts.get("done", 0),
            "failed": counts.get("failed", 0), "created": row[3],
        }  # fmt: skip

    def view(self, job_id: str) -> JobView | None:
        with self._lock:
            row = self._db.execute("SELECT id, status, total, created FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            summary = self._summary(row)
            rows = self._db.execute(
                "SELECT idx, key, url, cache, error FROM items WHERE job = ? ORDER BY idx", (job_id,)
            ).fetchall()
        items: list[ItemView] = [{"index": r[0], "key": r[1], "url": r[2], "cache": r[3], "error": r[4]} for r in rows]
        return {
            "id": summary["id"], "status": summary["status"], "total": summary["total"],
            "done": summary["done"], "failed": summary["failed"], "items": items,
        }  # fmt: skip

    def listing(self, most: int) -> list[JobSummary]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, status, total, created FROM jobs ORDER BY created DESC LIMIT ?", (most,)
            ).fetchall()
            return [self._summary(row) for row in rows]

    def cancel(self, job_id: str) -> bool:
        with self._tx() as db:
            row = db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return False
            if row[0] in ("queued", "running"):
                db.execute("UPDATE jobs SET status = 'cancelled' WHERE id = ?", (job_id,))
                db.execute("UPDATE items SET state = 'dropped' WHERE job = ? AND state = 'pending'", (job_id,))
        return True

    def unfinished(self) -> bool:
        with self._lock:
            row = self._db.execute("SELECT 1 FROM jobs WHERE status IN ('queued', 'running') LIMIT 1").fetchone()
            return row is not None

    def take(self, wait: float) -> Claim | None:
        claim = self._take()
        if claim is None:
            with self._added:
                self._added.wait(wait)
            claim = self._take()
        return claim

    def _take(self) -> Claim | None:
        with self._tx() as db:
            row = db.execute(
                "SELECT items.job, items.idx, items.fields, items.key, items.url "
                "FROM items JOIN jobs ON jobs.id = items.job "
                "WHERE items.state = 'pending' AND jobs.status IN ('queued', 'running') "
                "ORDER BY jobs.created, items.idx LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            db.execute("UPDATE items SET state = 'working' WHERE job = ? AND idx = ?", (row[0], row[1]))
            db.execute("UPDATE jobs SET status = 'running' WHERE id = ? AND status = 'queued'", (row[0],))
        return Claim(row[0], row[1], json.loads(row[2]), row[3] or "", row[4] or "")

    def renew(self, claim: Claim) -> None:
        return None

    def finish(self, claim: Claim, key: str, url: str, cache: str | None, error: str | None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE items SET state = ?, key = ?, url = ?, cache = ?, error = ? WHERE job = ? AND idx = ?",
                (
                    "failed" if error is not None else "done",
                    key or None,
                    url or None,
                    cache,
                    error,
                    claim.job,
                    claim.index,
                ),
            )
            left = db.execute(
                "SELECT 1 FROM items WHERE job = ? AND state IN ('pending', 'working') LIMIT 1", (claim.job,)
            ).fetchone()
            if left is None:
                db.execute(
                    "UPDATE jobs SET status = 'done' WHERE id = ? AND status IN ('queued', 'running')", (claim.job,)
                )

    def release(self, claim: Claim) -> None:
        with self._tx() as db:
            db.execute("UPDATE items SET state = 'pending' WHERE job = ? AND idx = ? AND state = 'working'",
                       (claim.job, claim.index))  # fmt: skip

    def close(self) -> None:
        with self._lock:
            self._added.notify_all()
            self._db.close()
