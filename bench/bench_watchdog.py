"""Benchmark of the engine watchdog's cost per engine call (lib/engines/watchdog.py): each call runs
in a thread of its own under a deadline.

Prints, as medians over several runs of N calls each:
- one tone-engine synthesis (a few milliseconds of numpy) called directly vs through the
  watchdog: the added microseconds per call;
- one builtin-engine synthesis of a short sentence in a preset voice (espeak-ng in a
  fresh fork plus the level shaping), directly vs through the watchdog.

Run: .venv/bin/python bench/bench_watchdog.py [--runs N] [--calls N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.config.watchdog import WatchdogConfig
from lib.core.metrics import Metrics
from lib.engines.base import Engine
from lib.engines.tone import ToneEngine
from lib.engines.watchdog import Watchdog
from lib.engines.watched import WatchedEngine


def per_call(fn: Callable[[], Any], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls


def compare(name: str, engine: Engine, text: str, voice: str, runs: int, calls: int) -> None:
    watchdog = Watchdog(engine, WatchdogConfig(probe_interval=0), Metrics(dict))
    watched = WatchedEngine(engine, watchdog)
    profile = engine.preset_voice(voice)

    def direct() -> Any:
        return engine.synthesise(text, profile, style="", seed=0, speed=1.0, mode="preset")

    def guarded() -> Any:
        return watched.synthesise(text, profile, style="", seed=0, speed=1.0, mode="preset")

    direct(), guarded()  # warm up
    plain, watched_s = [], []
    for _ in range(runs):
        plain.append(per_call(direct, calls))
        watched_s.append(per_call(guarded, calls))
    a, b = statistics.median(plain), statistics.median(watched_s)
    print(f"{name}: direct {a * 1e3:.3f} ms, watched {b * 1e3:.3f} ms per call "
          f"(+{(b - a) * 1e6:.0f} us, x{b / a:.3f}; medians of {runs} runs of {calls} calls)")  # fmt: skip
    watchdog.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    compare("tone", ToneEngine(seconds_per_char=0.001), "hello", "tone-low", args.runs, args.calls)
    from lib.engines.builtin import BuiltinEngine

    builtin = BuiltinEngine()
    compare("builtin", builtin, "Please take a seat.", "en-female", args.runs, max(args.calls // 10, 5))
    builtin.close()


if __name__ == "__main__":
    main()
