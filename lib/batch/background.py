"""The start-up preload: the shipped phrase list made in a thread of its own while the
app already serves (``webui.py --preload FILE``, what ``./run.sh`` starts).

Nobody waits for it: the UI answers from the first second, and a phrase asked for
before its turn is made then, once (the service's single-flight: the preload then finds
it cached). Its progress is :meth:`BackgroundPreload.status` (``GET /api/preload``, the
UI's banner and Preload tab) and a progress bar on the terminal; at the end it prints
the report ``preload_cache.py`` prints (:func:`lib.batch.preload.print_report`).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from typing_extensions import TypedDict

from lib.batch.preload import PreloadReport, preload, print_report, progress_bar
from lib.compose.templates import load_templates
from lib.core.logtext import cut_text
from lib.errors import TTSError
from lib.request.access import LOCAL
from lib.request.phrases import PhraseRules, expand, load_phrases

if TYPE_CHECKING:
    from lib.pipeline.service import TTSService

__all__ = ["BackgroundPreload", "PreloadState", "PreloadStatus"]

_LOGGER = logging.getLogger(__name__)

PreloadState = Literal["idle", "loading", "running", "done", "failed", "stopped"]
"""``idle``: none asked for; ``loading``: reading the list; ``running``; ``done``: every
phrase tried (some may have failed: ``failed`` counts them); ``failed``: the list could
not be read (``error`` says why); ``stopped``: the app stopped first."""


class PreloadStatus(TypedDict):
    """The start-up preload as ``GET /api/preload`` and the UI show it."""

    state: PreloadState
    list: str
    """The phrase list's file name."""
    total: int
    """Requests in the list (each template piece counts as one); 0 until it is read."""
    done: int
    generated: int
    cached: int
    failed: int
    seconds: float
    summary: str
    """``preload_cache.py``'s summary line once done, else ""."""
    error: str
    """Why the list could not be read (state ``failed``), else ""."""


class _Stopped(Exception):
    """Raised from the progress callback to end the preload when the app stops."""


class BackgroundPreload:
    """One preload of ``path`` through ``service`` in a daemon thread (see the module)."""

    def __init__(self, service: TTSService | None, path: Path | None, *, out: IO[str] | None = None) -> None:
        self._service = service
        self._path = path
        self._out = out if out is not None else sys.stdout
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._report: PreloadReport | None = None
        self._status: PreloadStatus = {
            "state": "idle", "list": path.name if path is not None else "", "total": 0, "done": 0,
            "generated": 0, "cached": 0, "failed": 0, "seconds": 0.0, "summary": "", "error": "",
        }  # fmt: skip

    @classmethod
    def none(cls) -> BackgroundPreload:
        """No start-up preload (``status`` stays ``idle``)."""
        return cls(None, None)

    def start(self) -> None:
        """Start the thread (once)."""
        if self._service is None or self._path is None or self._thread is not None:
            return
        self._set(state="loading")
        self._thread = threading.Thread(target=self._run, name="preload", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the preload after the request in progress (the app is stopping)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> PreloadReport | None:
        """The report once the preload ended (None: still running, or it never ran)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._report

    @property
    def report(self) -> PreloadReport | None:
        """The report once the preload finished (None before, or when it did not)."""
        return self._report

    def status(self) -> PreloadStatus:
        with self._lock:
            return PreloadStatus(**self._status)  # a copy

    @property
    def running(self) -> bool:
        return self.status()["state"] in ("loading", "running")

    # -- the thread ---------------------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        with self._lock:
            self._status.update(changes)  # type: ignore[typeddict-item]

    def _run(self) -> None:
        service, path = self._service, self._path
        assert service is not None and path is not None  # start() checked
        started = time.perf_counter()
        try:
            rules = PhraseRules.from_config(service.config.preload)
            requests = expand(load_phrases(path, rules))
            templates = load_templates(path, rules)
        except TTSError as exc:
            _LOGGER.error("preload: %s; nothing was preloaded (the UI serves every phrase when asked)", exc)
            self._set(state="failed", error=str(exc))
            return
        total = len(requests) + sum(len(service.templates.pieces(t)) for t in templates)
        self._set(state="running", total=total)
        print(
            f"preload: {total} phrases of {path.name} in the background; the UI serves meanwhile",
            file=self._out,
            flush=True,
        )
        bar = progress_bar(total)

        def step(report: PreloadReport) -> None:
            self._set(done=report.total, generated=report.generated, cached=report.cached, failed=report.failed,
                      seconds=round(report.seconds, 1))  # fmt: skip
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{report.generated} new, {report.cached} cached, {report.failed} failed")
            if self._stop.is_set():
                raise _Stopped

        try:
            report = preload(service, requests, on_done=step, templates=templates, caller=LOCAL)
        except _Stopped:
            self._set(state="stopped", seconds=round(time.perf_counter() - started, 1))
            _LOGGER.info("preload: stopped with the app; entries made so far are kept")
            return
        except Exception as exc:
            _LOGGER.exception("preload: ended by an error; the UI serves every phrase when asked")
            self._set(state="failed", error=cut_text(str(exc), 200))
            return
        finally:
            if bar is not None:
                bar.close()
        service.cache.flush()  # every entry on disk before anyone counts them
        self._report = report
        print_report(report, out=self._out, err=sys.stderr)
        if report.failed:
            print(f"preload: warning: {report.failed} phrases failed; the UI makes them when asked "
                  "(run preload_cache.py again later)", file=sys.stderr, flush=True)  # fmt: skip
        self._set(
            state="done", summary=report.summary(), seconds=round(report.seconds, 1), done=report.total,
            generated=report.generated, cached=report.cached, failed=report.failed,
        )  # fmt: skip
