"""Preload: make sure every request of a phrase list is cached, skipping what is
(used by ``preload_cache.py`` and the web UI's Preload tab). A list's templates are
preloaded as their pieces (:meth:`lib.compose.templates.Template.pieces`): each piece counts as
one request in the report.

A lexicon change re-keys the phrases and pieces whose text contains its term: they are
misses, made again like any other, and the report lists them apart
(:attr:`PreloadReport.relexicon`: cached before a remembered change,
:meth:`lib.readings.Readings.rekeyed`).

A phrase without a seed is its approved take when it has one (:mod:`lib.takes`): cached.
A phrase rebuilt under an approved take's seed (``force``, or a fresh deployment from a
list *Export top phrases* wrote, whose ``take`` is the approved audio's digest) is
compared with the approved audio; one that differs (an engine that is not
deterministic) is listed (:attr:`PreloadReport.differs`) and the approved audio stays."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from typing_extensions import TypedDict

from lib.compose.templates import Template
from lib.core.logtext import cut_text
from lib.errors import TTSError, ValidationError
from lib.request.access import Action, Caller, check
from lib.request.messages import explain
from lib.request.phrases import PhraseRequest, expand, load_phrases
from lib.takes.records import pcm_digest

if TYPE_CHECKING:
    from lib.pipeline.service import TTSService

__all__ = [
    "FailureRow",
    "PreloadReport",
    "advance",
    "make_missing",
    "phrase_label",
    "preload",
    "print_report",
    "progress_bar",
]

_LOGGER = logging.getLogger(__name__)


class FailureRow(TypedDict):
    """One failed phrase or piece of a preload, as the API reports it."""

    entry: str
    """Its place in the list (``phrases[4]``, ``templates[0] piece '十'``)."""
    phrase: str
    """What an operator calls it: its text and voice."""
    message: str
    """Why it failed."""


@dataclass
class PreloadReport:
    """What a preload did. ``total == generated + cached + failed``."""

    total: int = 0
    generated: int = 0
    cached: int = 0
    failed: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)
    """(entry, message) of each failed request."""
    labels: dict[str, str] = field(default_factory=dict)
    """Entry -> what an operator calls it: the phrase's text and voice (failures only)."""
    dry_run: bool = False
    relexicon: list[str] = field(default_factory=list)
    """Entries (phrases and template pieces) generated again because a lexicon change
    re-keyed them: cached before the change (a part of ``generated``)."""
    differs: list[str] = field(default_factory=list)
    """Phrases whose rebuilt audio differs from their approved take (the approved one stays)."""

    def failure_rows(self, most: int = 20) -> list[FailureRow]:
        """The first ``most`` failures, each with the phrase's text and voice."""
        return [
            {"entry": entry, "phrase": self.labels.get(entry, entry), "message": message}
            for entry, message in self.failures[:most]
        ]

    def failure_lines(self, most: int = 20) -> list[str]:
        """The failures for the terminal, in Chinese and English: each phrase by its text
        and voice, then its place in the list and why."""
        lines = [
            f"preload: 失败 failed: {row['phrase']} · {row['entry']}: {explain(TTSError(row['message']))}"
            for row in self.failure_rows(most)
        ]
        if len(self.failures) > most:
            more = len(self.failures) - most
            lines.append(f"preload: … 另有 {more} 条失败 and {more} more failed")
        return lines

    def differs_lines(self, most: int = 20) -> list[str]:
        """The phrases rebuilt differently from their approved takes, for the terminal."""
        lines = [f"preload: rebuilt audio differs from the approved take: {entry}" for entry in self.differs[:most]]
        if len(self.differs) > most:
            lines.append(f"preload: ... and {len(self.differs) - most} more rebuilt differently")
        if self.differs:
            lines.append(
                f"preload: {len(self.differs)} phrases rebuilt differently from their approved takes "
                "(the engine is not deterministic); the approved audio is kept"
            )
        return lines

    def relexicon_lines(self, most: int = 20) -> list[str]:
        """The re-rendered entries as lines for a log or the terminal."""
        if not self.relexicon:
            return []
        verb = "would be re-rendered" if self.dry_run else "re-rendered"
        lines = [f"preload: {verb} after a lexicon change: {entry}" for entry in self.relexicon[:most]]
        if len(self.relexicon) > most:
            lines.append(f"preload: ... and {len(self.relexicon) - most} more {verb} after a lexicon change")
        return lines

    def summary(self) -> str:
        return (
            f"preload: {self.total} phrases, {self.generated} generated, {self.cached} already cached, "
            f"{self.failed} failed in {self.seconds:.1f} s"
        )


def print_report(report: PreloadReport, *, out: IO[str], err: IO[str]) -> None:
    """A preload's report as ``preload_cache.py`` prints it: each failure, re-rendered
    and differing phrase on ``err``, then the summary line on ``out``."""
    for line in report.failure_lines(most=len(report.failures)):
        print(line, file=err)
    for line in report.relexicon_lines():
        print(line, file=err)
    for line in report.differs_lines():
        print(line, file=err)
    if report.dry_run:
        print("preload: dry run, nothing was synthesised; 'generated' counts what would be", file=err)
    err.flush()
    print(report.summary(), file=out, flush=True)


def progress_bar(total: int) -> Any:
    """A progress bar of ``total`` phrases on stderr (tqdm), or None without tqdm."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with gradio
        return None
    return tqdm(total=total, unit="phrase", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)


def advance(bar: Any) -> Callable[[PreloadReport], None]:
    """The ``on_done`` of a preload (local or remote) that moves ``bar`` (None: nothing)
    and shows the counts so far."""

    def progress(report: PreloadReport) -> None:
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"{report.generated} new, {report.cached} cached, {report.failed} failed")

    return progress


def preload(
    service: TTSService,
    requests: list[PhraseRequest],
    *,
    workers: int = 1,
    force: bool = False,
    dry_run: bool = False,
    on_done: Callable[[PreloadReport], None] | None = None,
    caller: Caller,
    pin_as: str = "preload",
    templates: Sequence[Template] = (),
) -> PreloadReport:
    """Make sure every request is cached. Cached ones are skipped (``force``
    regenerates them); ``dry_run`` only counts what would be generated. ``on_done`` is
    called after each request (progress). Safe beside a serving process: the service
    runs each key once across processes, and a killed run leaves only whole entries.

    With ``cache.pin_preload``, the keys of ``requests`` (and of the templates'
    pieces) become the pinned list ``pin_as`` before anything is made (replacing what that list pinned before), so
    the eviction policy keeps them (lib/cache/policy.py)."""
    if workers < 1:
        raise ValidationError("workers: must be at least 1")
    check(caller, Action.FORCE if force else Action.PRELOAD)
    items: list[PhraseRequest | _Piece] = list(requests)
    for template in templates:
        items.extend(_Piece(f"{template.entry} piece {p!r}", template, p) for p in service.templates.pieces(template))
    if service.config.cache.pin_preload and not dry_run:
        _pin(service, items, pin_as)
    report = PreloadReport(total=0, dry_run=dry_run)
    lock = threading.Lock()
    started = time.perf_counter()

    def one(item: PhraseRequest | _Piece) -> None:
        if isinstance(item, _Piece):
            outcome, message = _preload_piece(service, item, force=force, dry_run=dry_run)
        else:
            outcome, message = _preload_one(service, item, force=force, dry_run=dry_run, caller=caller)
        differs = outcome == "generated" and message == _DIFFERS
        if differs:
            outcome, message = "generated", ""
        rekeyed = outcome == "generated" and not force and _rekeyed(service, item)
        with lock:
            report.total += 1
            if rekeyed:
                report.relexicon.append(item.entry)
            if differs:
                report.differs.append(item.entry)
            if outcome == "generated":
                report.generated += 1
            elif outcome == "cached":
                report.cached += 1
            else:
                report.failed += 1
                report.failures.append((item.entry, message))
                report.labels[item.entry] = phrase_label(item)
            report.seconds = time.perf_counter() - started
            if on_done is not None:
                on_done(report)

    if workers == 1:
        for item in items:
            one(item)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preload") as pool:
            try:
                for future in [pool.submit(one, item) for item in items]:
                    future.result()
            except BaseException:  # Ctrl-C: drop what has not started, let running ones end
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    report.seconds = time.perf_counter() - started
    return report


def make_missing(service: TTSService, *, caller: Caller, workers: int = 1) -> PreloadReport:
    """Make what the Cache tab counts as missing: the phrases of ``templates.file`` (the
    hot phrases) and the pieces of every template the service answers. A preload of
    them (what is cached is skipped; each key is made once across threads and
    processes, so beside a running preload nothing is made twice). The admin's:
    engine time for everyone (:attr:`Action.MAKE_MISSING`)."""
    check(caller, Action.MAKE_MISSING)
    path = service.config.templates.file
    requests = expand(load_phrases(path)) if path is not None and Path(path).is_file() else []
    report = preload(service, requests, templates=service.templates.templates(), caller=caller, workers=workers)
    service.cache.flush()  # every entry on disk before the Cache tab counts them
    return report


def phrase_label(item: PhraseRequest | _Piece) -> str:
    """The phrase as an operator knows it: its text and voice."""
    if isinstance(item, _Piece):
        return f"模板片段 template piece「{cut_text(item.text)}」（{item.template.voice}）"
    voice = item.voice or "上传的录音 uploaded recording"
    return f"「{cut_text(item.text)}」（{voice}）"


def _rekeyed(service: TTSService, item: PhraseRequest | _Piece) -> bool:
    """Whether ``item`` was cached before a lexicon change re-keyed it."""
    try:
        if isinstance(item, _Piece):
            piece = service.templates.piece_request(item.template, item.text)
            return piece is not None and service.readings.rekeyed(piece)
        return service.readings.rekeyed(service.resolve(item.request()))
    except TTSError:
        return False


def _pin(service: TTSService, items: list[PhraseRequest | _Piece], name: str) -> None:
    keys = []
    for item in items:
        try:
            if isinstance(item, _Piece):  # a template's piece: what its composed answers need
                piece = service.templates.piece_request(item.template, item.text)
                if piece is not None:
                    keys.append(piece.key)
            else:
                r = service.resolve(item.request())
                approval = service.takes.answering(r)  # an unseeded phrase's: its approved take
                keys.append(approval.key if approval is not None else r.key)
        except TTSError:
            continue  # reported when the request itself is tried
    digest = service.cache.store.pin(name, keys)
    if digest is not None:
        _LOGGER.info("pinned %d entries as list %r (digest %s)", len(keys), name, digest)


def _preload_one(
    service: TTSService, item: PhraseRequest, *, force: bool, dry_run: bool, caller: Caller
) -> tuple[str, str]:
    started = time.perf_counter()
    try:
        request = item.request()
        r = service.resolve(request)
        approval = service.takes.approval_for(r)  # also a seeded request of the approved take: compared below
        if service.takes.answering(r) is not None and approval is not None:  # the approved take answers it
            if not (force and service.takes.current(approval)):
                if not dry_run:
                    _count_cached(service, started)
                return "cached", ""
            request = replace(request, seed=approval.seed)  # force: rebuild the take, to compare
            r = service.resolve(request)
        if not force and service.cache.lookup(r.key) is not None:
            if not dry_run:
                _count_cached(service, started)
            return "cached", ""
        if dry_run:
            return "generated", ""
        if force:
            service.admin.forget(r.key, caller=caller)  # the caller was checked for FORCE above
        result = service.synthesise(request)
    except TTSError as exc:
        return "failed", str(exc)
    # HIT here means another process (the UI, a second preload) made it meanwhile.
    if result.cache != "MISS":
        return "cached", ""
    expected = item.take or (approval.digest if approval is not None else "")
    same = not expected or pcm_digest(result.audio.wav[result.audio.offset :]) == expected
    if approval is not None and result.key == approval.key and not same:
        service.takes.reinstate(approval)  # the approved audio stays what is played
    return ("generated", "") if same else ("generated", _DIFFERS)


_DIFFERS = "rebuilt audio differs from the approved take"


@dataclass(frozen=True)
class _Piece:
    entry: str
    template: Template
    text: str


def _preload_piece(service: TTSService, item: _Piece, *, force: bool, dry_run: bool) -> tuple[str, str]:
    started = time.perf_counter()
    try:
        outcome = service.preload_piece(item.template, item.text, force=force, dry_run=dry_run)
    except TTSError as exc:
        return "failed", str(exc)
    if outcome == "cached" and not dry_run:
        _count_cached(service, started)
    return outcome, ""


def _count_cached(service: TTSService, started: float) -> None:
    """A phrase or piece the preload found cached (skipped): the dashboard's "already
    cached" (``preload_hits``), beside its "generated". Statistics only: nothing was
    served, so the request metrics are not touched."""
    service.dashboard.stats.record("hit", time.perf_counter() - started, origin="preload")
