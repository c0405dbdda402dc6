"""The engine watchdog's probe: a tiny synthesis that checks an idle engine still works.

When no engine call ran for ``watchdog.probe_interval`` seconds (and a few seconds after
a call timed out), :class:`Prober` speaks :data:`PROBE_TEXT` in the engine's first preset
voice, through the watchdog's deadline like any call, and hands what it found to
:meth:`lib.watchdog.Watchdog.record_probe`: ``/healthz`` reports a failed probe as
"engine failing" until a call succeeds. An engine without preset voices is not probed
(real calls still report it failing). The probe's result is never cached.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from lib.audio import check_engine_audio
from lib.engines.base import Engine
from lib.errors import EngineTimeoutError, EngineUnavailableError, log_safe
from lib.metrics import Metrics
from lib.textnorm import cut_text
from lib.watchdogconfig import WatchdogConfig

__all__ = ["PROBE_TEXT", "Prober", "probe"]

_LOGGER = logging.getLogger(__name__)

#: What the probe speaks, in the engine's first preset voice.
PROBE_TEXT = "OK."

T = TypeVar("T")


class Watchdog(Protocol):
    """What a probe needs of :class:`lib.watchdog.Watchdog` (which starts the prober)."""

    engine: Engine
    config: WatchdogConfig
    metrics: Metrics | None

    def run(self, call: str, deadline: float, fn: Callable[[], T]) -> T: ...

    def record_probe(self, found: dict[str, Any]) -> None: ...

    def postpone_probe(self) -> None: ...

    def until_probe(self) -> float: ...

    def refusing(self) -> bool: ...


def probe(watchdog: Watchdog) -> dict[str, Any]:
    """One probe synthesis now; what it found (``ok``, ``result``, ``error``,
    ``seconds``, ``at``), also recorded in ``watchdog`` unless it did not run."""
    engine = watchdog.engine
    presets = engine.presets()
    if not presets or "preset" not in engine.modes:
        return {"ok": True, "result": "skipped", "error": "the engine has no preset voice to probe with"}
    started = time.monotonic()
    result, error = "ok", ""
    try:
        voice = engine.preset_voice(presets[0])
        synth = watchdog.run(
            "probe", watchdog.config.deadline(chars=len(PROBE_TEXT)),
            lambda: engine.synthesise(PROBE_TEXT, voice, style="", seed=0, speed=1.0, mode="preset"),
        )  # fmt: skip
        check_engine_audio(synth.audio)
    except EngineTimeoutError as exc:
        result, error = "timed out", str(exc)
    except EngineUnavailableError as exc:
        if watchdog.refusing():  # shutting down, or a call is stuck (health says so already)
            return {"ok": False, "result": "not run", "error": str(exc)}
        result, error = "failed", str(exc)
    except Exception as exc:
        result, error = "failed", f"{type(exc).__name__}: {exc}"
    found = {
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
