"""The engine watchdog's probe: a real sentence per language that checks an idle engine works.

When no engine call ran for ``watchdog.probe_interval`` seconds (and a few seconds after
a call timed out), :class:`Prober` speaks :data:`PROBE_TEXTS` -- an ordinary announcement
in Mandarin and one in English, each in a preset voice of its language (else the first
preset) -- through the watchdog's deadline like any call, and checks each result as the
producer checks any result (:func:`lib.engines.plausible.check_result`: finite, in range,
not silent, as long as its reading allows). What it found goes to
:meth:`lib.engines.watchdog.Watchdog.record_probe`: ``/healthz`` reports a failed probe as "engine
failing", with the language and why, until a call succeeds. An engine without preset
voices is not probed (real calls still report it failing). The probe's result is never
cached. (It spoke "OK." once: a text too short to show a broken engine, and one that a
broken runtime failed on while longer texts sounded.)
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from lib.config.watchdog import WatchdogConfig
from lib.core.logtext import cut_text
from lib.core.metrics import Metrics
from lib.core.reports import ProbeResult
from lib.engines.base import Engine
from lib.engines.plausible import check_result
from lib.errors import EngineTimeoutError, EngineUnavailableError, TTSError, log_safe

__all__ = ["PROBE_TEXTS", "Prober", "probe"]

_LOGGER = logging.getLogger(__name__)

#: What the probe speaks: language -> an ordinary announcement.
PROBE_TEXTS = {
    "zh": "欢迎光临，请在黄线外排队等候。",
    "en": "Welcome, please wait behind the yellow line.",
}

T = TypeVar("T")


class Watchdog(Protocol):
    """What a probe needs of :class:`lib.engines.watchdog.Watchdog` (which starts the prober)."""

    engine: Engine
    config: WatchdogConfig
    metrics: Metrics | None

    def run(self, call: str, deadline: float, fn: Callable[[], T]) -> T: ...

    def record_probe(self, found: ProbeResult) -> None: ...

    def postpone_probe(self) -> None: ...

    def until_probe(self) -> float: ...

    def refusing(self) -> bool: ...


def probe(watchdog: Watchdog) -> ProbeResult:
    """One probe synthesis now; what it found (``ok``, ``result``, ``error``,
    ``seconds``, ``at``), also recorded in ``watchdog`` unless it did not run."""
    engine = watchdog.engine
    presets = engine.presets()
    if not presets or "preset" not in engine.modes:
        return {"ok": True, "result": "skipped", "error": "the engine has no preset voice to probe with"}
    started = time.monotonic()
    result, error = "ok", ""
    language = ""
    try:
        from lib.text import read

        for language, text in PROBE_TEXTS.items():
            name = next((p for p in presets if p.startswith(f"{language}-")), presets[0])
            voice = engine.preset_voice(name)
            reading = read(text)
            call = functools.partial(
                engine.synthesise, text, voice, style="", seed=0, speed=1.0, mode="preset", reading=reading
            )
            synth = watchdog.run("probe", watchdog.config.deadline(chars=len(text)), call)
            check_result(synth.audio, engine.sample_rate, reading, 1.0, paced=bool(getattr(engine, "paced", False)))
    except EngineTimeoutError as exc:
        result, error = "timed out", str(exc)
    except EngineUnavailableError as exc:
        if watchdog.refusing():  # shutting down, or a call is stuck (health says so already)
            return {"ok": False, "result": "not run", "error": str(exc)}
        result, error = "failed", str(exc)
    except TTSError as exc:  # its message says what is wrong
        result, error = "failed", str(exc)
    except Exception as exc:
        result, error = "failed", f"{type(exc).__name__}: {exc}"
    if error and language:
        error = f"{language}: {error}"
    found: ProbeResult = {
        "ok": result == "ok", "result": result, "error": cut_text(error, 160) if error else None,
        "seconds": round(time.monotonic() - started, 3), "at": round(time.time(), 3),
    }  # fmt: skip
    if result != "ok":
        _LOGGER.error("engine %s: the probe synthesis %s: %s", engine.name, result, cut_text(error, 160))
    if watchdog.metrics is not None:
        watchdog.metrics.engine_probes.labels(engine.name, result.replace("timed out", "timeout")).inc()
    watchdog.record_probe(found)
    return found


class Prober:
    """The thread that probes ``watchdog``'s engine when it is due."""

    def __init__(self, watchdog: Watchdog) -> None:
        self._watchdog = watchdog
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-probe", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            wait = self._watchdog.until_probe()
            if wait > 0:
                self._stop.wait(wait)
                continue
            try:
                probe(self._watchdog)
            except Exception as exc:  # the probe thread must not die
                _LOGGER.error("engine probe failed: %s", log_safe(exc))
            self._watchdog.postpone_probe()

    def stop(self, *, join: bool = True) -> None:
        self._stop.set()
        if join:
            self._thread.join(timeout=5)
