"""What each request leaves behind: a line in the log, its statistics and its metrics.

One place for it, because three paths answer requests (a whole answer, a streamed one
whose result is recorded by the thread that makes it, and errors at any step) and all
must count alike. Requests whose caller asked for no trace (bypass, ``store=false``, or
``cache.store_text: false``) leave no text in the statistics; logs cut text to 32
characters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from lib.cache.stats import Phrase, Stats
from lib.config import AppConfig
from lib.core.logtext import cut_text
from lib.core.metrics import Metrics
from lib.errors import TTSError
from lib.pipeline.results import SynthesisResult
from lib.request.types import ConvertRequest, Resolved, TTSRequest

__all__ = ["AnyRequest", "Recorder"]

#: What the service answers: a synthesis or a conversion, or its resolution (resolved once).
AnyRequest = TTSRequest | ConvertRequest | Resolved

_LOGGER = logging.getLogger("lib.pipeline.service")  # the request log keeps its name


class Recorder:
    def __init__(
        self, stats: Stats, metrics: Metrics, config: AppConfig,
        usage: Callable[[str, float, float], None] = lambda cache, audio, engine: None,
    ) -> None:  # fmt: skip
        """``usage(cache, audio_seconds, engine_seconds)``: the caller's account of each
        answered request (lib.tenants)."""
        self.usage = usage
        self.stats = stats
        self.metrics = metrics
        self.config = config

    def record(self, request: AnyRequest, r: Resolved, result: SynthesisResult, started: float) -> None:
        """One answered request (``started``: its ``time.perf_counter()``)."""
        seconds = time.perf_counter() - started
        label = result.cache.lower()
        saved = float(result.audio.meta.get("engine_seconds", 0.0)) if result.cache == "HIT" else 0.0
        self.stats.record(
            label, seconds, key=result.key, phrase=self.phrase(r, _asked(request, r)), origin=r.origin,
            saved_ms=saved * 1e3,
        )  # fmt: skip
        if saved:
            self.metrics.engine_seconds_saved.inc(saved)
        self.usage(result.cache, float(result.duration), float(result.audio.meta.get("engine_seconds", 0.0)))
        self.metrics.count_request(label, seconds)
        _LOGGER.info("%s key=%s %.1f ms text=%r", result.cache, result.key, seconds * 1e3, cut_text(r.fields.text))

    def piece_made(self, started: float) -> None:
        """A template piece synthesised by the preload: counted with the preload's
        misses, so that the dashboard's "generated" agrees with the preload's report."""
        seconds = time.perf_counter() - started
        self.stats.record("miss", seconds, origin="preload")
        self.metrics.count_request("miss", seconds)

    def failed(self, request: AnyRequest, r: Resolved | None, exc: BaseException, started: float) -> None:
        """A request that ended in ``exc`` (a :class:`TTSError`, or a bug: logged whole)."""
        seconds = time.perf_counter() - started
        self.stats.record("error", seconds, origin=_origin(request))
        self.metrics.count_request("error", seconds)
        key = r.key if r is not None else "-"
        text = getattr(_asked(request, r), "text", "")
        text = text if isinstance(text, str) else ""
        # The client gets the whole message; the log gets what failed, not the
        # message, which may quote more of the caller's input (user text stays <= 32).
        if not isinstance(exc, TTSError):
            _LOGGER.error("request failed key=%s text=%r", key, cut_text(text), exc_info=exc)
            return
        why = str(exc) if exc.http_status >= 500 else f"{type(exc).__name__} ({exc.http_status})"
        _LOGGER.info("request failed key=%s text=%r: %s", key, cut_text(text), why)

    def first_audio(self, cache: str, started: float) -> None:
        """The first audio of a streamed answer is ready to send."""
        seconds = time.perf_counter() - started
        self.metrics.first_audio.labels(cache.lower()).observe(seconds)
        self.stats.add("streams")
        self.stats.add("first_audio_ms", seconds * 1e3)

    def phrase(self, r: Resolved, request: AnyRequest | None = None) -> Phrase | None:
        """What the statistics may remember of ``r``: nothing of a request whose caller
        asked for no trace (bypass, ``store=false``), when texts are not kept, or of a
        conversion (its "text" is the source recording's fingerprint). The text and
        style are the caller's, exactly as typed (the key's normalised text would
        rewrite their punctuation and spaces in an export)."""
        if not (r.leaves_trace and self.config.cache.store_text) or r.source is not None:
            return None
        f = r.fields
        typed, typed_style = getattr(request, "text", None), getattr(request, "style", None)
        text = typed if isinstance(typed, str) else f.text
        style = typed_style if f.style and isinstance(typed_style, str) else f.style
        return Phrase(text, r.voice_name, f.voice, style, f.seed, f.speed, f.mode)


def _asked(request: AnyRequest, r: Resolved | None) -> AnyRequest | None:
    """The request as its caller gave it: a resolution carries it."""
    if r is not None and r.request is not None:
        return r.request
    return request.request if isinstance(request, Resolved) else request


def _origin(request: AnyRequest) -> str:
    return "preload" if request.origin == "preload" else "user"
