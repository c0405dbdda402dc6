"""Benchmark of the cache core on a 5 s clip (tone test engine, real diskcache).

Prints, as medians over several runs:
- hit latency p50/p99 from the memory tier and from the disk tier;
- the overhead a miss adds over calling the engine directly;
- disk-tier hit latency with 1,000 vs 100,000 entries in the store.

Run: .venv/bin/python bench/bench_cache.py [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.cache.entry import CachedAudio, pack
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest

CLIP_TEXT = "x" * 50  # 50 chars x 0.1 s = a 5 s clip
POLICY: str | None = None  # --policy: cache.eviction_policy (None: the default)
RAW = False  # --raw: results are the engine's audio untouched (no loudness target, no tail)


def _service(cache_dir: str, memory: bool) -> tuple[TTSService, ToneEngine]:
    engine = ToneEngine(seconds_per_char=0.1)
    overrides: dict[str, Any] = {"engine": "tone", "cache.dir": cache_dir, "voices.prewarm": False}
    if not memory:
        overrides["cache.memory_bytes"] = 0
    if POLICY is not None:
        overrides["cache.eviction_policy"] = POLICY
    config = load_config(env={}, overrides=overrides)
    if RAW:
        config = dataclasses.replace(config, segments=dataclasses.replace(config.segments, loudness=None, tail=0.0))
    return TTSService(config, engine), engine


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


def _hit_latency(svc: TTSService, request: TTSRequest, n: int) -> tuple[float, float]:
    svc.synthesise(request)  # make sure it is stored
    times = []
    for _ in range(n):
        t = time.perf_counter()
        result = svc.synthesise(request)
        times.append((time.perf_counter() - t) * 1e3)
        if result.cache != "HIT":
            raise RuntimeError("expected a hit")
    return _percentiles(times)


def bench_tiers(runs: int, n: int) -> None:
    request = TTSRequest(text=CLIP_TEXT, voice="tone-low")
    for label, memory in (("memory", True), ("disk", False)):
        p50s, p99s = [], []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as d:
                svc, _ = _service(d, memory)
                p50, p99 = _hit_latency(svc, request, n)
                svc.close()
            p50s.append(p50)
            p99s.append(p99)
        print(f"{label}-tier hit: p50 {statistics.median(p50s):.3f} ms, p99 {statistics.median(p99s):.3f} ms "
              f"(median of {runs} runs x {n} hits)")  # fmt: skip


def bench_miss_overhead(runs: int, n: int) -> None:
    overheads = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            svc, engine = _service(d, True)
            voice = engine.preset_voice("tone-low")
            direct, through = [], []
            for i in range(n):
                text = f"{i:04d}" + CLIP_TEXT[4:]
                t = time.perf_counter()
                engine.synthesise(text + "!", voice, style="", seed=0, speed=1.0, mode="preset")
                direct.append(time.perf_counter() - t)
                t = time.perf_counter()
                result = svc.synthesise(TTSRequest(text=text, voice="tone-low"))
                through.append(time.perf_counter() - t)
                if result.cache != "MISS":
                    raise RuntimeError("expected a miss")
            svc.close()
        overheads.append((statistics.median(through) - statistics.median(direct)) * 1e3)
    print(f"miss overhead over a direct engine call: {statistics.median(overheads):.3f} ms "
          f"(median of {runs} runs x {n} misses; engine alone {statistics.median(direct) * 1e3:.2f} ms)")  # fmt: skip


def bench_scale(runs: int, n: int, sizes: tuple[int, ...]) -> None:
    small = CachedAudio.from_pcm("0" * 32, ToneEngine().synthesise(
        "ab", ToneEngine().preset_voice("tone-low"), style="", seed=0, speed=1.0, mode="preset"
    ).audio.__mul__(32767).astype("int16")[:2000], 22_050, {})  # fmt: skip
    filler = pack(small)
    request = TTSRequest(text=CLIP_TEXT, voice="tone-low")
    results: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as d:
        svc, _ = _service(d, False)
        cache = svc.cache.store._disk.open()
        filled = 0
        for size in sizes:
            if cache is not None:
                with cache.transact():
                    for i in range(filled, size):
                        cache.set(f"{i:032x}", filler, tag=svc.tag)
            filled = size
            p50s = [_hit_latency(svc, request, n)[0] for _ in range(runs)]
            results[size] = statistics.median(p50s)
            print(f"disk-tier hit p50 with {svc.cache.store.stats()['entries']:,} entries: {results[size]:.3f} ms")
        svc.close()
    first, last = results[sizes[0]], results[sizes[-1]]
    print(f"ratio {sizes[-1]:,} vs {sizes[0]:,} entries: {last / first:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test)")
    parser.add_argument("--policy", help="cache.eviction_policy to measure (default: the configured default)")
    parser.add_argument("--raw", action="store_true", help="segments.loudness null and tail 0 (no levelling)")
    args = parser.parse_args()
    global POLICY, RAW
    POLICY, RAW = args.policy, args.raw
    runs, n = (2, 200) if args.quick else (5, 1000)
    print(
        f"bench_cache: {time.strftime('%Y-%m-%d')}, python {sys.version.split()[0]}, policy {POLICY or 'default'}"
        f"{', raw engine audio' if RAW else ''}"
    )
    bench_tiers(runs, n)
    bench_miss_overhead(runs, 50 if args.quick else 200)
    bench_scale(runs, n, (1_000, 10_000 if args.quick else 100_000))


if __name__ == "__main__":
    main()
