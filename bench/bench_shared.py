"""Benchmark of the shared (Redis) tier with two replicas (tone test engine, real
redis-server, real diskcache).

Prints, as medians over several runs:
- hit latency of a request served from the Redis tier (first request on replica B for
  an entry made on replica A: GET, verify, copy into B's disk and memory tiers) vs
  from B's local disk tier and memory tier, plus the raw read of the packed entry
  (Redis GET vs diskcache get);
- the two-replica hit rate when phrases were preloaded on replica A only, with requests
  spread round-robin over both replicas (as a load balancer does), with the shared tier
  and, for comparison, without it.

And for the object-store tier (lib/objects; no Redis: the replicas share only the store):
- hit latency on a cold replica (first request for an entry made on another replica:
  object GET, verify, copy into the local tiers), p50 per run, vs the local disk and
  memory tiers, plus the raw object GET;
- a preload run once (a job with its own cache directory) for all replicas: how many
  engine calls and hits several cold replicas then see, with the store and without it.

The two replicas are two ``TTSService`` objects with separate cache directories in one
process; they share nothing but Redis (or the object store). Starts its own
``redis-server`` on a free port unless ``--redis-url`` is given (then it uses the namespace
``bench:`` and clears it), and its own S3 server (moto's, tests/s3_server.py: a Python
server, much slower than MinIO or S3, so its figures are an upper bound) unless
``--objects-url`` is given (credentials from the ``AWS_*`` variables; a fresh prefix is
used and cleared).

Run: .venv/bin/python bench/bench_shared.py [--quick] [--tiers redis,objects]
         [--redis-url redis://...] [--objects-url http://minio:9000/bucket/prefix]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest

TEXT_CHARS = 50  # x 0.1 s per char = 5 s clips, as in bench_cache.py


def _service(cache_dir: Path, url: str | None, objects_url: str | None = None) -> TTSService:
    overrides: dict[str, Any] = {
        "engine": "tone", "cache.dir": str(cache_dir), "cache.shared_url": url, "voices.prewarm": False,
        "cache.objects_url": objects_url,
    }  # fmt: skip
    return TTSService(load_config(env={}, overrides=overrides), ToneEngine(seconds_per_char=0.1))


def _phrase(i: int, tag: str) -> str:
    return f"phrase {tag} {i} ".ljust(TEXT_CHARS, "x")


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


@contextmanager
def _pair(url: str | None) -> Iterator[tuple[TTSService, TTSService]]:
    base = Path(tempfile.mkdtemp(prefix="bench-shared-"))
    a, b = _service(base / "a", url), _service(base / "b", url)
    try:
        yield a, b
    finally:
        if a.cache.shared is not None:
            a.cache.shared.clear()
        a.close()
        b.close()
        shutil.rmtree(base, ignore_errors=True)


def bench_latency(url: str, runs: int, n: int) -> None:
    by_tier: dict[str, list[float]] = {"shared": [], "disk": [], "memory": [], "redis GET": [], "diskcache get": []}
    size = 0
    for run in range(runs):
        with _pair(url) as (a, b):
            requests = [TTSRequest(text=_phrase(i, f"lat{run}"), voice="tone-low") for i in range(n)]
            for request in requests:  # made on replica A
                a.synthesise(request)
            a.cache.flush()
            samples: dict[str, list[float]] = {k: [] for k in by_tier}
            for request in requests:
                for expected in ("shared", "disk", "memory"):
                    if expected == "disk":
                        b.cache.memory.clear()
                    t0 = time.perf_counter()
                    result = b.synthesise(request)
                    took = _ms(t0)
                    if result.info.get("tier") != expected:
                        raise RuntimeError(f"expected a hit from the {expected} tier, got {result.cache} {result.info}")
                    samples[expected].append(took)
                key = result.key
                t0 = time.perf_counter()
                blob = b.cache.shared.get(key)
                samples["redis GET"].append(_ms(t0))
                t0 = time.perf_counter()
                b.cache.store.get_blob(key)
                samples["diskcache get"].append(_ms(t0))
                size = len(blob or b"")
            for tier, values in samples.items():
                by_tier[tier].append(statistics.median(values))
    print(f"hit latency on replica B, {runs} runs x {n} entries of {size / 1024:.0f} KiB (5 s clips), median ms:")
    for tier, label in (
        ("shared", "Redis tier hit (GET + verify + copy to local tiers)"),
        ("disk", "local disk tier hit"),
        ("memory", "memory tier hit"),
        ("redis GET", "raw Redis GET of the packed entry"),
        ("diskcache get", "raw diskcache get of the packed entry"),
    ):
        values = by_tier[tier]
        spread = f"(runs {min(values):.3f}-{max(values):.3f})"
        print(f"  {label:<55} {statistics.median(values):8.3f} ms {spread}")
    ratio = statistics.median(by_tier["shared"]) / statistics.median(by_tier["disk"])
    print(f"  Redis tier hit / disk tier hit: {ratio:.2f}x")


def bench_hit_rate(url: str, runs: int, phrases: int, requests: int) -> None:
    for label, shared_url in (("with the shared tier", url), ("without it (local tiers only)", None)):
        rates: list[float] = []
        b_calls: list[int] = []
        for run in range(runs):
            with _pair(shared_url) as (a, b):
                texts = [_phrase(i, f"hr{run}") for i in range(phrases)]
                for text in texts:  # preloaded on replica A only
                    a.synthesise(TTSRequest(text=text, voice="tone-low"))
                a.cache.flush()
                engine_before = a.engine.calls + b.engine.calls  # type: ignore[attr-defined]
                rng = random.Random(run)
                hits = 0
                for i in range(requests):
                    replica = (a, b)[i % 2]  # round-robin load balancer
                    result = replica.synthesise(TTSRequest(text=rng.choice(texts), voice="tone-low"))
                    hits += result.cache == "HIT"
                rates.append(hits / requests)
                b_calls.append(a.engine.calls + b.engine.calls - engine_before)  # type: ignore[attr-defined]
        print(
            f"two-replica hit rate, preloaded on replica A only, {label}: {100 * statistics.median(rates):.1f} % "
            f"({requests} requests over {phrases} phrases, median of {runs} runs; "
            f"engine calls after preload: {statistics.median(b_calls):.0f})"
        )


@contextmanager
def _replicas(objects_url: str | None, names: tuple[str, ...]) -> Iterator[list[TTSService]]:
    base = Path(tempfile.mkdtemp(prefix="bench-objects-"))
    services = [_service(base / name, None, objects_url) for name in names]
    try:
        yield services
    finally:
        for service in services:
            service.close()
        shutil.rmtree(base, ignore_errors=True)


def _p50(values: list[float]) -> float:
    return statistics.median(values)


def bench_objects_latency(url: str, runs: int, n: int) -> None:
    by_tier: dict[str, list[float]] = {"objects": [], "disk": [], "memory": [], "object GET": []}
    size = 0
    for run in range(runs):
        with _replicas(url, ("maker", "cold")) as (maker, cold):
            requests = [TTSRequest(text=_phrase(i, f"olat{run}"), voice="tone-low") for i in range(n)]
            for request in requests:
                maker.synthesise(request)
            maker.flush()
            samples: dict[str, list[float]] = {k: [] for k in by_tier}
            for request in requests:
                for expected in ("objects", "disk", "memory"):
                    if expected == "disk":
                        cold.cache.memory.clear()
                    t0 = time.perf_counter()
                    result = cold.synthesise(request)
                    took = _ms(t0)
                    if result.info.get("tier") != expected:
                        raise RuntimeError(f"expected a hit from the {expected} tier, got {result.cache} {result.info}")
                    samples[expected].append(took)
                assert cold.cache.objects is not None
                t0 = time.perf_counter()
                blob = cold.cache.objects.get(result.key)
                samples["object GET"].append(_ms(t0))
                size = len(blob or b"")
            for tier, values in samples.items():
                by_tier[tier].append(_p50(values))
            maker.clear()
    print(
        f"object-store tier: hit latency on a cold replica, {runs} runs x {n} entries of {size / 1024:.0f} KiB, "
        "p50 ms (median of the runs' p50s):"
    )
    for tier, label in (
        ("objects", "object-store hit (GET + verify + copy to local tiers)"),
        ("disk", "local disk tier hit"),
        ("memory", "memory tier hit"),
        ("object GET", "raw object GET of the packed entry"),
    ):
        values = by_tier[tier]
        print(f"  {label:<55} {_p50(values):8.3f} ms (runs {min(values):.3f}-{max(values):.3f})")
    print(f"  object-store hit / disk tier hit: {_p50(by_tier['objects']) / _p50(by_tier['disk']):.1f}x")


def bench_objects_preload(url: str, runs: int, phrases: int, replicas: int) -> None:
    from lib.batch.preload import preload
    from lib.request.phrases import PhraseRequest

    names = tuple(f"r{i}" for i in range(replicas))
    for label, objects_url in (("with the object store", url), ("without it (local tiers only)", None)):
        engine_calls: list[int] = []
        hit_rates: list[float] = []
        preload_s: list[float] = []
        for run in range(runs):
            with _replicas(objects_url, ("job", *names)) as (job, *cold):
                phrase_list = [
                    PhraseRequest(f"phrases[{i}]", _phrase(i, f"pre{run}"), voice="tone-low") for i in range(phrases)
                ]
                requests = [p.request() for p in phrase_list]
                t0 = time.perf_counter()
                report = preload(job, phrase_list, caller=LOCAL)  # once, on its own machine and cache directory
                job.flush()
                preload_s.append(time.perf_counter() - t0)
                if report.failed:
                    raise RuntimeError(f"preload failed: {report.failures[:3]}")
                hits = 0
                for service in cold:
                    for request in requests:
                        hits += service.synthesise(request).cache == "HIT"
                engine_calls.append(sum(s.engine.calls for s in cold))  # type: ignore[attr-defined]
                hit_rates.append(hits / (phrases * replicas))
                job.clear()
        print(
            f"preload once ({phrases} phrases, {_p50(preload_s):.2f} s), then {replicas} cold replicas ask for all, "
            f"{label}: {100 * _p50(hit_rates):.1f} % hits, {_p50(engine_calls):.0f} engine calls on the replicas "
            f"(median of {runs} runs)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Shared (Redis) and object-store tier benchmark")
    parser.add_argument("--tiers", default="redis,objects", help="which to run: redis, objects or both")
    parser.add_argument("--redis-url", help="use this Redis instead of starting a redis-server")
    parser.add_argument("--objects-url", help="use this S3 endpoint/bucket/prefix instead of starting moto's server")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--entries", type=int, default=40, help="entries timed per run (latency)")
    parser.add_argument("--phrases", type=int, default=50, help="phrases preloaded on replica A (hit rate)")
    parser.add_argument("--requests", type=int, default=400, help="requests spread over both replicas (hit rate)")
    parser.add_argument("--replicas", type=int, default=3, help="cold replicas after the object-store preload")
    parser.add_argument("--quick", action="store_true", help="fewer runs and entries (smoke test)")
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.ERROR)  # not the admin's "cache cleared" between runs
    if args.quick:
        args.runs, args.entries, args.phrases, args.requests = 3, 10, 20, 100
    tiers = {t.strip() for t in args.tiers.split(",") if t.strip()}
    if "redis" in tiers:
        code = _bench_redis(args)
        if code:
            return code
    if "objects" in tiers:
        _bench_objects(args)
    return 0


def _bench_redis(args: argparse.Namespace) -> int:
    server = None
    url = args.redis_url
    if url is None:
        from redis_server import RedisServer

        binary = shutil.which("redis-server")
        if binary is None:
            print("bench_shared: redis-server is not installed; apt-get install -y redis-server, or pass --redis-url")
            return 2
        server = RedisServer(binary).start()
        url = server.url
    print(f"bench_shared: Redis at {url.split('@')[-1]}")
    try:
        bench_latency(url, args.runs, args.entries)
        bench_hit_rate(url, args.runs, args.phrases, args.requests)
    finally:
        if server is not None:
            server.close()
    return 0


def _bench_objects(args: argparse.Namespace) -> None:
    import os
    import uuid

    server = None
    url = args.objects_url
    if url is None:
        from s3_server import S3Server

        server = S3Server().start()
        os.environ.update(S3Server.env())
        url = server.url("bench")
        print(f"bench_shared: object store at {url} (moto's S3 server, a Python process on loopback)")
    else:
        url = f"{url.rstrip('/')}/bench-{uuid.uuid4().hex[:8]}"
        print(f"bench_shared: object store at {url}")
    try:
        bench_objects_latency(url, args.runs, args.entries)
        bench_objects_preload(url, args.runs, args.phrases, args.replicas)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
