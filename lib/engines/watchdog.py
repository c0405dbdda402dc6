"""The engine watchdog: a deadline on every engine call, and the engine's health.

Why: one engine call that never returned (espeak-ng aborting while its worker kept the
pipe open) held the engine's lock forever: every later miss waited, the key's lease was
renewed forever, ``/healthz`` said "ok" and SIGTERM could not stop the process. Now every
call (:class:`lib.engines.watched.WatchedEngine` routes them here) runs in a thread of
its own, admitted ``concurrent_calls`` at a time (an engine attribute, 1 if absent; the
clock starts at admission, so queueing behind healthy calls is never taken for a hang),
and its caller waits until the deadline (``watchdog:`` in config.yaml). Then:

- the caller fails with :class:`lib.errors.EngineTimeoutError` (504), before any tier
  sees an entry, releasing the key's lease on the way (never renewed past the deadline
  anyway: :data:`RENEW_UNTIL`); counted, logged;
- the engine is interrupted where it can be (``engine.interrupt()``: the builtin engine
  kills its espeak-ng worker, the call ends at once and frees the engine's lock);
- until the late call returns the engine is *stuck*: new calls are refused with 503
  after :data:`_GRACE` seconds and ``/healthz`` is degraded. That is all a watchdog can
  do for a call nothing can interrupt (CosyVoice inside torch: no thread can be stopped
  in C code): fail the request, report the engine, refuse work until the call returns.

Failures in a row, or a failed probe (:mod:`lib.engines.probe`), make the engine *failing*
until a call succeeds. :meth:`Watchdog.drain` and :meth:`Watchdog.close` (shutdown) stop
every call and wake every caller, so SIGTERM ends in seconds even with a stuck call.

A call nobody waits for any more (:mod:`lib.core.waiting`: its client disconnected, and
no other request shares its key) is never admitted: it fails with
:class:`lib.errors.AbandonedError` instead, also while it queues for a slot. A call once
admitted runs to its end (no engine call can be stopped cleanly halfway).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from lib.config.watchdog import WatchdogConfig
from lib.core.logtext import cut_text
from lib.core.metrics import Metrics
from lib.core.reports import EngineHealth, HealthReport, ProbeResult
from lib.core.waiting import abandoned
from lib.engines.base import Engine
from lib.engines.probe import Prober
from lib.errors import AbandonedError, EngineError, EngineTimeoutError, EngineUnavailableError, TTSError, log_safe

__all__ = ["RENEW_UNTIL", "SHUTDOWN_DRAIN", "Watchdog"]

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")

RENEW_UNTIL: ContextVar[Callable[[float | None], None] | None] = ContextVar("renew_until", default=None)
"""Set by whoever holds a lease around engine calls (:mod:`lib.compose.produce`): called with the
monotonic time a call's deadline falls due when the call is admitted, and with None when
it returned in time; the lease is not renewed past that time."""

#: Seconds a new call waits for a call past its deadline to return (an interrupted
#: builtin call returns within milliseconds) before it is refused.
_GRACE = 2.0
#: Engine failures in a row that make the engine "failing".
_FAILING_AFTER = 3
#: Seconds after a timeout before a probe checks the engine again.
_PROBE_AFTER_TIMEOUT = 3.0
#: Seconds engine calls under way may go on once the server is told to stop (SIGTERM):
#: none. Their work is abandoned (the engine interrupted where it can be, nothing partial
#: stored, their requests answered 503), so that a stop never waits for an engine call
#: (a Kokoro sentence is seconds of CPU; with 3 s here a SIGTERM took 3.9-7.1 s).
SHUTDOWN_DRAIN = 0.0
#: How often a waiting caller looks whether the service is shutting down.
_POLL = 0.25

_WHAT = {
    "synthesise": "synthesis", "stream": "synthesis", "convert": "conversion",
    "extract_voice": "voice analysis", "probe": "probe synthesis", "load": "model load",
}  # fmt: skip


@dataclass(eq=False)
class _Call:
    call: str
    deadline: float
    """Seconds it may take from ``started``."""
    started: float
    overdue_since: float | None = None

    @property
    def due(self) -> float:
        return self.started + self.deadline


class Watchdog:
    """Deadlines, admission and health of one engine's calls. Thread-safe."""

    def __init__(self, engine: Engine, config: WatchdogConfig, metrics: Metrics | None = None) -> None:
        self.engine = engine
        self.config = config
        self.metrics = metrics
        self._slots: int | None = getattr(engine, "concurrent_calls", 1)
        self._cond = threading.Condition()
        self._calls: set[_Call] = set()
        self._closed = False
        self._drain_until = float("inf")  # when shutdown stops every call (drain)
        self._interrupted = False
        self._failures = 0
        self._last_error = ""
        self._probe: ProbeResult | None = None
        self._probe_due = time.monotonic() + config.probe_interval
        self.timeouts = 0
        self._prober = Prober(self) if config.probe_interval > 0 else None

    # -- calls ------------------------------------------------------------------------------

    def run(self, call: str, deadline: float, fn: Callable[[], T]) -> T:
        """``fn()`` (one engine call) in a thread of its own, given up at ``deadline``
        seconds after it was admitted."""
        c = self._enter(call, deadline)
        box: list[tuple[bool, Any]] = []
        done = threading.Event()

        def work() -> None:
            try:
                box.append((True, fn()))
            except BaseException as exc:
                box.append((False, exc))
            finally:
                self._leave(c, None if box[0][0] else box[0][1])
                done.set()

        threading.Thread(target=work, name=f"engine-{call}", daemon=True).start()
        self._wait(c, done.wait)
        self._returned()
        ok, value = box[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def iterate(self, call: str, deadline: float, make: Callable[[], Iterator[T]]) -> Iterator[T]:
        """The items of ``make()`` (an engine's stream) as they come, produced by a
        thread of its own; given up at ``deadline`` seconds after admission."""
        c = self._enter(call, deadline)
        items: queue.Queue[tuple[str, Any]] = queue.Queue()
        stop = threading.Event()

        def work() -> None:
            error: BaseException | None = None
            try:
                stream = make()
                try:
                    for item in stream:
                        items.put(("item", item))
                        if stop.is_set():
                            break  # the reader went away: end the engine's stream early
                finally:
                    close = getattr(stream, "close", None)
                    if callable(close):
                        close()
            except BaseException as exc:
                error = exc
            self._leave(c, error)
            items.put(("error", error) if error is not None else ("end", None))

        found: list[tuple[str, Any]] = []

        def take(timeout: float) -> bool:
            try:
                found.append(items.get(timeout=timeout))
                return True
            except queue.Empty:
                return False

        threading.Thread(target=work, name=f"engine-{call}", daemon=True).start()
        try:
            while True:
                self._wait(c, take)
                kind, value = found.pop()
                if kind == "item":
                    yield value
                    continue
                self._returned()
                if kind == "end":
                    return
                raise value
        finally:
            stop.set()

    def _enter(self, call: str, deadline: float) -> _Call:
        name = self.engine.name
        with self._cond:
            while True:
                if self._closed or time.monotonic() >= self._drain_until:
                    raise EngineUnavailableError(f"the service is shutting down; the {name} engine takes no new calls")
                gone = abandoned()  # looked at again each time a slot frees: queued work may lose its waiters
                if gone:
                    raise AbandonedError(gone)
                stuck = self._stuck()
                if stuck is not None:
                    assert stuck.overdue_since is not None
                    waited = time.monotonic() - stuck.overdue_since
                    if waited >= _GRACE:
                        if self.metrics is not None:
                            self.metrics.engine_refused.labels(name).inc()
                        raise EngineUnavailableError(
                            f"the {name} engine is stuck: {self._stuck_message(stuck)} (cached results are still "
                            "served); retry later"
                        )
                    self._cond.wait(_GRACE - waited)
                elif self._slots is None or len(self._calls) < self._slots:
                    break
                else:
                    self._cond.wait(_POLL * 4)  # woken when a call leaves; looks at stuck calls again
            c = _Call(call, deadline, time.monotonic())
            self._calls.add(c)
        hook = RENEW_UNTIL.get()
        if hook is not None:
            hook(c.due)
        return c

    def _wait(self, c: _Call, wait: Callable[[float], bool]) -> None:
        """Until ``wait`` says done; raises at the deadline or at shutdown."""
        while True:
            left = c.due - time.monotonic()
            if wait(min(max(left, 0.0), _POLL)):
                return
            what = _WHAT.get(c.call, c.call)
            if self._closed or time.monotonic() >= self._drain_until:
                self._interrupt_once()
                raise EngineUnavailableError(f"the service is shutting down; this {what} was stopped")
            if left <= 0 and self._timed_out(c):
                raise EngineTimeoutError(
                    f"the {self.engine.name} engine did not finish this {what} within its deadline of "
                    f"{c.deadline:.0f} s (watchdog: in config.yaml); nothing was cached. Try again, or send "
                    "a shorter text"
                )

    def _returned(self) -> None:
        hook = RENEW_UNTIL.get()
        if hook is not None:
            hook(None)

    def _timed_out(self, c: _Call) -> bool:
        """Mark ``c`` overdue (False if it returned meanwhile), count it, log it and
        interrupt the engine."""
        name = self.engine.name
        with self._cond:
            if c not in self._calls:
                return False
            c.overdue_since = time.monotonic()
            self.timeouts += 1
            self._probe_due = time.monotonic() + _PROBE_AFTER_TIMEOUT
        if self.metrics is not None:
            self.metrics.engine_timeouts.labels(name, c.call).inc()
        interrupted = self._interrupt()
        _LOGGER.error(
            "engine %s: a %s call passed its %.1f s deadline; failed with 504, %s", name, c.call, c.deadline,
            "engine interrupted" if interrupted else "it cannot be interrupted: new calls are refused until it returns",
        )  # fmt: skip
        self._gauge()
        return True

    def _leave(self, c: _Call, error: BaseException | None) -> None:
        with self._cond:
            self._calls.discard(c)
            now = time.monotonic()
            self._probe_due = max(self._probe_due, now + self.config.probe_interval)
            if c.overdue_since is not None:
                _LOGGER.warning(
                    "engine %s: the %s call that passed its deadline returned %.1f s after it (%s); taking calls again",
                    self.engine.name, c.call, now - c.overdue_since, "failed" if error is not None else "succeeded",
                )  # fmt: skip
            elif error is None:
                self._failures = 0
                if c.call != "probe" and self._probe is not None:
                    self._probe["superseded"] = True
            elif not isinstance(error, TTSError) or isinstance(error, EngineError):
                # A client's mistake (a bad text, an unknown voice) is not the engine failing.
                self._failures += 1
                self._last_error = cut_text(f"{type(error).__name__}: {error}", 120)
            self._cond.notify_all()
        self._gauge()

    def _stuck(self) -> _Call | None:
        overdue = [c for c in self._calls if c.overdue_since is not None]
        return min(overdue, key=lambda c: c.started) if overdue else None

    def _stuck_message(self, c: _Call) -> str:
        return (
            f"a {_WHAT.get(c.call, c.call)} passed its {c.deadline:.0f} s deadline {time.monotonic() - c.due:.0f} s "
            "ago and has not returned; new engine calls are refused until it does"
        )

    # -- health -----------------------------------------------------------------------------

    def health(self) -> EngineHealth:
        """``state`` ok, stuck or failing, and why (``reason``), for ``/healthz``."""
        now = time.monotonic()
        with self._cond:
            late = [c for c in self._calls if c.overdue_since is not None or now > c.due]
            probe = self._probe.copy() if self._probe is not None else None
            failures, last_error, in_flight = self._failures, self._last_error, len(self._calls)
        reason = None
        state: Literal["ok", "stuck", "failing"]
        problems: list[str] = list(getattr(self.engine, "health_problems", list)())
        if late:
            state, reason = "stuck", "engine stuck: " + self._stuck_message(min(late, key=lambda c: c.started))
        elif probe is not None and not probe["ok"] and not probe.get("superseded"):
            state, reason = "failing", f"engine failing: the probe synthesis {probe['result']}: {probe['error']}"
        elif failures >= _FAILING_AFTER:
            state, reason = "failing", f"engine failing: the last {failures} engine calls failed ({last_error})"
        elif problems:
            # Serving, but not as configured (e.g. the Kokoro base refused by its runtime check).
            state, reason = "failing", "engine degraded: " + "; ".join(problems)
        else:
            state = "ok"
        return {
            "state": state, "reason": reason, "calls_in_flight": in_flight, "timeouts": self.timeouts,
            "failures_in_a_row": failures, "probe": probe,
        }  # fmt: skip

    def annotate(self, health: HealthReport) -> HealthReport:
        """``health`` (the stores', lib.ops.dashboard) with the engine's: ``engine_state``,
        and "degraded" with the reason while the engine is stuck or failing."""
        engine = self.health()
        health["engine_state"] = engine
        if engine["reason"]:
            health["reasons"] = [*health.get("reasons", []), engine["reason"]]
            if health.get("status") == "ok":
                health["status"] = "degraded"
        return health

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.engine_healthy.set(1 if self.health()["state"] == "ok" else 0)

    # -- probes (lib.engines.probe runs them) ---------------------------------------------------

    def record_probe(self, found: ProbeResult) -> None:
        with self._cond:
            self._probe = found
        self._gauge()

    def postpone_probe(self) -> None:
        with self._cond:
            self._probe_due = time.monotonic() + self.config.probe_interval

    def until_probe(self) -> float:
        """Seconds until a probe is due (at least a moment while a call runs)."""
        with self._cond:
            wait = self._probe_due - time.monotonic()
            return max(wait, _POLL * 4) if self._calls else wait

    def refusing(self) -> bool:
        """Whether new calls are refused now (shutdown, or a call stuck)."""
        with self._cond:
            return self._closed or self._stuck() is not None

    # -- shutdown ---------------------------------------------------------------------------

    def drain(self, seconds: float = SHUTDOWN_DRAIN) -> None:
        """Shutdown has begun (SIGTERM): calls may go on for ``seconds`` more (by default
        none), then every one still running is stopped (its caller fails with 503, at
        most :data:`_POLL` later) and the engine interrupted. Callable from any thread."""
        with self._cond:
            self._drain_until = min(self._drain_until, time.monotonic() + seconds)
            self._cond.notify_all()
        if self._prober is not None:
            self._prober.stop(join=False)

    def close(self) -> None:
        """Take no more calls, wake every waiting caller (they fail with 503) and
        interrupt the engine if a call is running, so shutdown never waits for one."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._interrupt_once()
        if self._prober is not None:
            self._prober.stop()

    def _interrupt_once(self) -> None:
        """At shutdown: interrupt the engine if a call is running (once)."""
        with self._cond:
            if self._interrupted or not self._calls:
                return
            self._interrupted = True
        self._interrupt()

    def _interrupt(self) -> bool:
        """``engine.interrupt()`` where the engine has one; True if it stopped something."""
        interrupt = getattr(self.engine, "interrupt", None)
        try:
            return callable(interrupt) and bool(interrupt())
        except Exception as exc:
            _LOGGER.error("engine %s: could not interrupt the call: %s", self.engine.name, log_safe(exc))
            return False

    def close_engine(self, timeout: float = 3.0) -> bool:
        """``engine.close()``, given up after ``timeout`` seconds (a call stuck inside the
        engine may hold the lock it needs); True if it finished."""
        done = threading.Event()

        def close() -> None:
            try:
                self.engine.close()
            except Exception as exc:
                _LOGGER.error("engine %s: close failed: %s", self.engine.name, log_safe(exc))
            finally:
                done.set()

        threading.Thread(target=close, name="engine-close", daemon=True).start()
        if done.wait(timeout):
            return True
        _LOGGER.warning("engine %s: still in a call after %.0f s; not closed", self.engine.name, timeout)
        return False
