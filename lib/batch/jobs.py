"""Batch jobs: a list of requests submitted over HTTP (``POST /api/batch``, docs/batch.md)
and made in the background by one worker thread per service, through the service's one
request path (:meth:`lib.pipeline.service.TTSService.synthesise`, as the preload): a
cached item is a ``HIT`` with no engine call, a new text is made once (single-flight
with every other request), a bad item fails alone with its error.

Jobs and their progress are kept on a :mod:`board <lib.batch.board>`: without Redis a
SQLite database in the cache directory, so a restart continues them; with the Redis
tier (``cache.shared_url``) a Redis Stream and hashes (:mod:`lib.batch.stream`), so every
replica takes items and a job reads the same from each.

Who may submit is decided in one place, :func:`admit`, which is given the job's price
(:func:`price`: the characters the engine would be sent).
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lib.core.ratelimit import LogLimiter
from lib.errors import EngineError, NotFoundError, TTSError, ValidationError
from lib.request.access import Action, Caller, allows, check
from lib.request.types import TTSRequest
from lib.tenants import Tenants, current_account

from .board import Board, Claim, JobSummary, JobView, LocalBoard, Planned, audio_url

if TYPE_CHECKING:
    from lib.pipeline.service import TTSService

__all__ = ["ID_PATTERN", "MAX_ITEMS", "BatchJobs", "ItemSpec", "admit", "plan", "price"]

_LOGGER = logging.getLogger(__name__)
_LIMITED = LogLimiter(_LOGGER, every=60.0)

#: Most items one job may hold.
MAX_ITEMS = 1000
#: A client-chosen job id.
ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: The fields an item may give (those of POST /api/tts a phrase list needs).
ITEM_FIELDS = ("text", "voice", "style", "seed", "format", "speed", "mode")


class ItemSpec:
    """One submitted item: the fields of its :class:`TTSRequest` (checked at the edge
    as ``POST /api/tts`` checks them), or the error that already failed it."""

    __slots__ = ("error", "fields")

    def __init__(self, fields: dict[str, Any], error: str | None = None) -> None:
        self.fields = {k: v for k, v in fields.items() if k in ITEM_FIELDS}
        self.error = error


def _request(fields: dict[str, Any]) -> TTSRequest:
    return TTSRequest(
        text=fields.get("text", ""), voice=fields.get("voice") or None, style=fields.get("style") or "",
        seed=fields.get("seed"), format=fields.get("format") or "wav", speed=fields.get("speed") or 1.0,
        mode=fields.get("mode") or None, origin="preload",
    )  # fmt: skip


def plan(service: TTSService, specs: list[ItemSpec]) -> tuple[list[Planned], int]:
    """Each item's key and URL, or its error (resolved as the request path resolves it:
    an unknown voice, an empty or too long text fails that item only), and the job's
    :func:`price`."""
    planned: list[Planned] = []
    new: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if spec.error is not None:
            planned.append(Planned(index, spec.fields, "", "", spec.error))
            continue
        try:
            r = service.resolve(_request(spec.fields))
        except TTSError as exc:
            planned.append(Planned(index, spec.fields, "", "", str(exc)))
            continue
        approval = service.takes.answering(r)  # an unseeded phrase's approved take answers it
        key = approval.key if approval is not None else r.key
        planned.append(Planned(index, spec.fields, key, audio_url(key, r.format)))
        if approval is None and key not in new and service.cache.lookup(key) is None:
            new[key] = len(r.fields.text)
    return planned, sum(new.values())


def price(service: TTSService, specs: list[ItemSpec]) -> int:
    """What a job costs: the characters that would be sent to the engine, once per
    distinct new text (an item already cached, or failed, costs nothing)."""
    return plan(service, specs)[1]


def admit(caller: Caller, characters: int, tenants: Tenants | None = None) -> None:
    """The one permission check of a batch job's submission: the admin, or a tenant (its
    key, the request's account: :func:`lib.tenants.current_account`) within its limits:
    the job's price (``characters``, :func:`price`) is charged to its
    ``synth_chars_per_hour`` before it starts, refused whole (429) when over. Anyone else
    401/403."""
    if allows(caller, Action.BATCH):
        return
    account = current_account()
    if tenants is not None and account is not None and account.keyed:
        tenants.admit_miss(characters, "this batch job").close()  # the budget now; the items are not charged again
        return
    check(caller, Action.BATCH)


#: Each service's jobs (:meth:`BatchJobs.of`).
_BY_SERVICE: weakref.WeakKeyDictionary[TTSService, BatchJobs] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


class BatchJobs:
    """The jobs of one service and its worker thread: :meth:`of` gives the service's."""

    def __init__(self, service: TTSService, board: Board) -> None:
        # A weak reference: the registry's value must not keep its key (the service) alive.
        self._service = weakref.ref(service)
        self.board = board
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._current: Claim | None = None

    @property
    def service(self) -> TTSService:
        service = self._service()
        if service is None:
            raise RuntimeError("the service of these batch jobs is gone")
        return service

    @classmethod
    def of(cls, service: TTSService) -> BatchJobs:
        """The service's jobs, built at the first call: with the Redis tier the worker
        starts at once (other replicas submit too), else when a job is submitted or when
        the cache directory holds unfinished ones (a restart)."""
        with _REGISTRY_LOCK:
            jobs = _BY_SERVICE.get(service)
            if jobs is None:
                jobs = _BY_SERVICE[service] = cls._build(service)
        return jobs

    @classmethod
    def _build(cls, service: TTSService) -> BatchJobs:
        config = service.config
        if config.cache.shared_url:
            from lib.batch.stream import StreamBoard  # imports redis: only with the tier configured

            jobs = cls(service, StreamBoard(config.cache.shared_url, lease=config.batch.lease_seconds))
            jobs._start()
            return jobs
        folder = Path(config.cache.dir) / "batch"
        if LocalBoard.exists(folder):
            jobs = cls(service, LocalBoard(folder))
            if jobs.board.unfinished():
                jobs._start()
            return jobs
        return cls(service, _LazyBoard(folder))

    # -- the endpoints' calls ------------------------------------------------------------

    def submit(self, specs: list[ItemSpec], *, job_id: str | None, caller: Caller) -> tuple[JobSummary, bool]:
        """Start a job of ``specs`` under ``job_id`` (None: a new id); True if it is new.
        The same id again is the same job (no new work)."""
        if job_id is not None and not ID_PATTERN.fullmatch(job_id):
            raise ValidationError(f"id: {job_id[:80]!r} is not a job id; use 1-64 of A-Z a-z 0-9 . _ -")
        if not 1 <= len(specs) <= MAX_ITEMS:
            raise ValidationError(f"items: give 1 to {MAX_ITEMS} items, got {len(specs)}")
        if job_id is not None:
            found = self._opened().summary(job_id)
            if found is not None:
                admit(caller, 0, self.service.tenants)
                return found, False
        planned, characters = plan(self.service, specs)
        admit(caller, characters, self.service.tenants)
        job_id = job_id or uuid.uuid4().hex
        self._start()  # opens a local board at its first job
        created = self.board.create(job_id, planned)
        summary = self.board.summary(job_id)
        if summary is None:  # pragma: no cover - a job is never deleted
            raise NotFoundError(f"batch job {job_id} vanished")
        _LOGGER.info("batch job %s: %d items, %d characters for the engine", job_id, len(planned), characters)
        return summary, created

    def _opened(self) -> Board:
        """The board, opened if another process (sharing the cache directory) made it."""
        board = self.board
        if isinstance(board, _LazyBoard) and LocalBoard.exists(board.folder):
            with self._lock:
                if isinstance(self.board, _LazyBoard):
                    self.board = self.board.open()
                board = self.board
        return board

    def status(self, job_id: str) -> JobView:
        view = self._opened().view(job_id)
        if view is None:
            raise NotFoundError(f"no batch job {job_id[:80]!r}; submit one with POST /api/batch")
        return view

    def cancel(self, job_id: str, *, caller: Caller) -> JobView:
        """Cancel a job: items not started are dropped, those at work finish."""
        admit(caller, 0)
        if not self._opened().cancel(job_id):
            raise NotFoundError(f"no batch job {job_id[:80]!r}; submit one with POST /api/batch")
        return self.status(job_id)

    def listing(self, most: int = 50) -> list[JobSummary]:
        """The newest jobs, newest first."""
        return self._opened().listing(most)

    # -- the worker --------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            if isinstance(self.board, _LazyBoard):
                self.board = self.board.open()
            self._thread = threading.Thread(target=self._run, name="batch-jobs", daemon=True)
            self._thread.start()
            if self.board.renews:
                threading.Thread(target=self._renew, name="batch-renew", daemon=True).start()

    def _stopping(self) -> bool:
        service = self._service()
        return self._stop.is_set() or service is None or service.closed

    def _run(self) -> None:
        while not self._stopping():
            try:
                claim = self.board.take(wait=0.5)
            except Exception as exc:  # the board is unreachable (Redis down): try again soon
                if self._stopping():
                    break
                _LIMITED.log(logging.WARNING, "take", "batch jobs: cannot take an item (%s); trying again", exc)
                self._stop.wait(2.0)
                continue
            if claim is None:
                continue
            self._current = claim
            try:
                outcome = self._make(claim)
                if outcome is None:  # closing, or the engine refuses: made later
                    self.board.release(claim)
                    self._stop.wait(1.0)
                else:
                    self.board.finish(claim, *outcome)
            except Exception as exc:
                _LOGGER.warning("batch jobs: cannot record item %d of %s (%s)", claim.index, claim.job, exc)
            finally:
                self._current = None
        _LOGGER.debug("batch jobs: worker stopped")
        if not self._stop.is_set():  # the service closed: so does the board
            self.close(timeout=0)

    def _make(self, claim: Claim) -> tuple[str, str, str | None, str | None] | None:
        """``(key, url, cache, error)`` of one item; None to leave it for later."""
        try:
            result = self.service.synthesise(_request(claim.fields))
            self.service.cache.wait_written(result.key)  # its URL works from now on
        except TTSError as exc:
            if self._stopping() or (isinstance(exc, EngineError) and self.service.watchdog.refusing()):
                return None
            return claim.key, claim.url, None, str(exc)
        except Exception as exc:
            if self._stopping():
                return None
            _LOGGER.error("batch job %s item %d: unexpected %s", claim.job, claim.index, type(exc).__name__)
            return claim.key, claim.url, None, "internal error; the server log has the details"
        url = audio_url(result.key, str(claim.fields.get("format") or "wav"))
        return result.key, url, "MISS" if result.cache == "MISS" else "HIT", None

    def _renew(self) -> None:
        every = max(0.5, self.service.config.batch.lease_seconds / 3)
        while not self._stop.wait(every) and not self._stopping():
            claim = self._current
            if claim is not None:
                try:
                    self.board.renew(claim)
                except Exception as exc:
                    _LOGGER.warning("batch jobs: cannot renew the claim on an item (%s)", type(exc).__name__)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker (an item at work is given back) and close the board."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.board.close()
        service = self._service()
        with _REGISTRY_LOCK:
            if service is not None and _BY_SERVICE.get(service) is self:
                del _BY_SERVICE[service]


class _LazyBoard:
    """A local board not yet opened: no file is made in the cache directory until the
    first job (most deployments never submit one)."""

    renews = False

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def open(self) -> LocalBoard:
        return LocalBoard(self.folder)

    def create(self, job_id: str, items: list[Planned]) -> bool:  # pragma: no cover - opened before
        raise RuntimeError("the board is opened before a job is created")

    def summary(self, job_id: str) -> JobSummary | None:
        return None

    def view(self, job_id: str) -> JobView | None:
        return None

    def listing(self, most: int) -> list[JobSummary]:
        return []

    def cancel(self, job_id: str) -> bool:
        return False

    def unfinished(self) -> bool:
        return False

    def take(self, wait: float) -> Claim | None:  # pragma: no cover - never started
        return None

    def renew(self, claim: Claim) -> None:  # pragma: no cover
        return None

    def finish(self, claim: Claim, key: str, url: str, cache: str | None, error: str | None) -> None:
        return None  # pragma: no cover

    def release(self, claim: Claim) -> None:  # pragma: no cover
        return None

    def close(self) -> None:
        return None
