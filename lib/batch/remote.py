"""``preload_cache.py --server URL``: a phrase list submitted to a running deployment as
batch jobs (``POST /api/batch``, at most 1000 items each) and followed to their end
(docs/batch.md). The report is the local preload's (:class:`PreloadReport`): a ``MISS``
item was generated, a ``HIT`` was already cached, a failed one is listed with its error.

A job's id is made from the list's content (``preload-<digest>-<n>``), so running the same
list again follows the same jobs instead of starting new ones (after an interruption,
say). Phrases a server cannot be sent (a voice given as a recording on this machine) fail
here with a message; templates are left to a local preload.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from lib.errors import TTSError
from lib.request.phrases import PhraseRequest

from .jobs import MAX_ITEMS
from .preload import PreloadReport, phrase_label

__all__ = ["BatchItem", "RemoteRefusal", "list_jobs", "phrase_items", "run_remote"]


class RemoteRefusal(TTSError):
    """The server refused a job (a bad token, a list it cannot take): nothing to follow."""


@dataclass
class _Job:
    status_url: str
    entries: list[str]
    """The phrase entries of the job's items, by index."""
    counted: set[int] = field(default_factory=set)


class BatchItem(TypedDict):
    """A batch item as ``POST /api/batch`` takes it."""

    text: str
    voice: str
    style: str
    format: str
    seed: NotRequired[int]
    speed: NotRequired[float]
    mode: NotRequired[str]


def phrase_items(requests: list[PhraseRequest]) -> tuple[list[tuple[str, BatchItem]], list[tuple[str, str]]]:
    """The batch items of a list's phrases, each with its entry (``phrases[3]``), and the
    phrases that cannot be sent to a server, each with why."""
    items: list[tuple[str, BatchItem]] = []
    unsent: list[tuple[str, str]] = []
    for request in requests:
        item = _item(request)
        if isinstance(item, str):
            unsent.append((request.entry, item))
        else:
            items.append((request.entry, item))
    return items, unsent


def list_jobs(items: list[tuple[str, BatchItem]]) -> list[tuple[str, list[tuple[str, BatchItem]]]]:
    """The items in jobs of at most :data:`MAX_ITEMS`, each with an id made from the
    whole list's content (``preload-<digest>-<n>``): the same list is the same jobs."""
    digest = hashlib.sha256(json.dumps([i for _, i in items], sort_keys=True).encode()).hexdigest()[:16]
    return [
        (f"preload-{digest}-{n}", items[first : first + MAX_ITEMS])
        for n, first in enumerate(range(0, len(items), MAX_ITEMS), start=1)
    ]


def _item(request: PhraseRequest) -> BatchItem | str:
    """The batch item of a phrase, or why it cannot be sent."""
    if request.prompt_audio is not None or not request.voice:
        return (
            "its voice is a recording on this machine; a server is sent voice names only: save the voice "
            "on the server (Voices tab, POST /api/voices) and name it in the list"
        )
    item: BatchItem = {"text": request.text, "voice": request.voice, "style": request.style, "format": "wav"}
    if request.seed is not None:
        item["seed"] = request.seed
    if request.speed != 1.0:
        item["speed"] = request.speed
    if request.mode:
        item["mode"] = request.mode
    return item


def run_remote(
    server: str,
    token: str | None,
    requests: list[PhraseRequest],
    *,
    on_done: Callable[[PreloadReport], None] | None = None,
    poll: float = 0.5,
) -> PreloadReport:
    """Submit ``requests`` to ``server`` and follow the jobs until each is done or
    cancelled; ``on_done`` is called after each finished phrase (progress). Raises
    :class:`RemoteRefusal` when a job is refused, :class:`httpx.HTTPError` when the server
    cannot be reached."""
    import httpx

    report = PreloadReport()
    started = time.perf_counter()
    items, unsent = phrase_items(requests)
    for entry, why in unsent:
        _count(report, entry, None, why, started, on_done)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=server, headers=headers, timeout=60) as http:
        jobs: list[_Job] = []
        for job_id, chunk in list_jobs(items):
            answer = http.post("/api/batch", json={"id": job_id, "items": [i for _, i in chunk]})
            if answer.status_code not in (200, 202):
                raise RemoteRefusal(f"the server refused the job (HTTP {answer.status_code}): {_error(answer)}")
            jobs.append(_Job(answer.json()["status_url"], [entry for entry, _ in chunk]))
        while jobs:
            for job in list(jobs):
                view = http.get(job.status_url)
                view.raise_for_status()
                body = view.json()
                for row in body["items"]:
                    index = row["index"]
                    if index in job.counted or (row["cache"] is None and row["error"] is None):
                        continue
                    job.counted.add(index)
                    _count(report, job.entries[index], row["cache"], row["error"], started, on_done)
                if body["status"] in ("done", "cancelled"):
                    for index, entry in enumerate(job.entries):
                        if index not in job.counted:  # dropped by a cancel on the server
                            _count(report, entry, None, "the job was cancelled on the server", started, on_done)
                    jobs.remove(job)
            if jobs:
                time.sleep(poll)
    report.seconds = time.perf_counter() - started
    names = {r.entry: phrase_label(r) for r in requests}  # a failure by its text and voice
    report.labels.update({entry: names[entry] for entry, _ in report.failures if entry in names})
    return report


def _count(
    report: PreloadReport,
    entry: str,
    cache: str | None,
    error: str | None,
    started: float,
    on_done: Callable[[PreloadReport], None] | None,
) -> None:
    report.total += 1
    if error is not None:
        report.failed += 1
        report.failures.append((entry, error))
    elif cache == "HIT":
        report.cached += 1
    else:
        report.generated += 1
    report.seconds = time.perf_counter() - started
    if on_done is not None:
        on_done(report)


def _error(answer: Any) -> str:
    try:
        return str(answer.json()["error"])
    except (ValueError, KeyError, TypeError):
        return str(answer.text)[:200]
