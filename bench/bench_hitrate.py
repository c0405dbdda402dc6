"""Cache efficiency: hit rate and engine seconds saved per eviction policy, beside
offline bounds, on request traces played through the real service and disk store.

Setup. 3,000 phrases of 6-40 characters, half Mandarin, half English. The engine is
the tone test double made to behave like the built-in engine on a cloned voice
(measured here with ``--calibrate``): audio lasts 0.27 s per Han character or
0.2 s + 0.045 s per Latin character, with noise at the level that makes its FLAC entry
as large as speech (about 23 KB per second), and each synthesis costs
0.005 s + 0.026 s per second of audio -- slept, scaled by ``--cost-scale`` so a run
takes seconds. The memory tier is off: every hit is a disk-tier hit. Capacity is
``share x 3,000 x mean entry size`` bytes (room for that share of the phrases).

Traces, 12,000 user requests each:
- ``zipf-0.8``, ``zipf-1.0``, ``zipf-1.2``: independent requests, Zipf popularity;
- ``shift``: Zipf 1.0 over six "days"; each day 30 % of the ranks get new phrases;
- ``scan``: ``zipf-1.0`` with a preload (``lib.batch.preload``) of 10 x capacity one-off
  phrases after request 6,000. Scan resistance = hit rate of the 1,000 user requests
  after the preload minus that of the very same requests in the ``zipf-1.0`` run
  without it (paired: the same trace and seed, so sampling noise cancels).

Bounds (computed on the same trace, sizes and costs):
- ``belady``: furthest next use first (with bypass): offline optimal by count when all
  entries are equal in size; with sizes it is the classical reference, not a bound;
- ``belady-cost``: a feasible offline cost-aware policy (evict the largest
  next-use distance x size / engine seconds): a lower bound on the offline optimum;
- ``upper``: the interval relaxation (Berger et al., "Practical bounds on optimal
  caching with variable object sizes", PFOO-U): a hit needs the entry held from one
  request of it to the next, occupying size x gap byte-requests; the cache holds at
  most capacity x trace-length of them, so a fractional knapsack over those intervals
  bounds every policy, online or offline, by count (value 1) and by engine seconds
  (value = cost);
- ``oracle``: the best *online* policy in expectation for independent requests: it
  knows every phrase's true probability and keeps the densest set (by p/size for
  count, p*cost/size for engine seconds) -- what no online policy can beat on average.

Run: .venv/bin/python bench/bench_hitrate.py [--seeds 3] [--first-seed 0] [--quick] [--simulate] [--calibrate]
"""

from __future__ import annotations

import argparse
import bisect
import functools
import hashlib
import math
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.batch.preload import preload
from lib.cache.entry import CachedAudio, pack
from lib.config import load_config
from lib.engines.base import Synthesis, VoiceProfile
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.phrases import PhraseRequest
from lib.request.types import TTSRequest

POLICIES = ("least-recently-used", "least-frequently-used", "cost-aware")
N_PHRASES = 3000
# Calibrated on the built-in engine (``--calibrate``; a cross-lingual clone of an espeak
# voice, 2026-12-01): audio seconds per character and engine seconds per audio second.
ZH_S_PER_CHAR = 0.27
EN_S_BASE, EN_S_PER_CHAR = 0.2, 0.045
COST_BASE, COST_PER_S = 0.005, 0.026
NOISE = 0.0023  # white-noise level that makes FLAC ~23 KB/s, as speech from the builtin engine
_HAN = "请顾客到号窗口办理业务欢迎光临列车即将进站注意安全谢谢您的耐心等待本次航班开始登机前往上海北京广州深圳"
_WORDS = ["please", "the", "train", "is", "now", "arriving", "at", "platform", "mind", "gap", "customer", "number",
          "window", "thank", "you", "for", "waiting"]  # fmt: skip


@functools.cache
def phrase_text(i: int) -> str:
    """Phrase ``i``: deterministic, unique, 6-40 characters, Mandarin or English."""
    rng = random.Random(i)
    n = rng.randint(6, 40)
    tag = f"{i:05d}"
    if rng.random() < 0.5:
        return tag + "".join(rng.choice(_HAN) for _ in range(n - len(tag)))
    words = tag
    while len(words) < n:
        words += " " + rng.choice(_WORDS)
    return words[:n]


def audio_seconds(text: str) -> float:
    if any("\u4e00" <= ch <= "\u9fff" for ch in text):
        return ZH_S_PER_CHAR * len(text)
    return EN_S_BASE + EN_S_PER_CHAR * len(text)


@functools.cache
def model_cost(text: str) -> float:
    return COST_BASE + COST_PER_S * audio_seconds(text)


class BenchEngine(ToneEngine):
    """The tone engine with the built-in engine's durations, entry sizes and costs."""

    def __init__(self, cost_scale: float) -> None:
        super().__init__()
        self.cost_scale = cost_scale

    def synthesise(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str
    ) -> Synthesis:
        with self._lock:
            self.calls += 1
        time.sleep(model_cost(text) * self.cost_scale)
        return Synthesis(_audio(text, self.sample_rate))


_NOISE_BUFFER = np.random.default_rng(0).normal(0.0, NOISE, 2 * 22_050 * 12).astype(np.float32)


def _audio(text: str, rate: int) -> Any:
    """A tone plus noise (a slice of one buffer, so making it costs little beside the
    slept engine cost)."""
    digest = hashlib.md5(text.encode()).digest()
    n = int(rate * audio_seconds(text))
    start = int.from_bytes(digest[:4], "little") % (_NOISE_BUFFER.size - n)
    t = np.arange(n, dtype=np.float32) / rate
    return 0.3 * np.sin(np.float32(2 * np.pi * (150 + digest[0])) * t) + _NOISE_BUFFER[start : start + n]


def entry_bytes(text: str) -> int:
    pcm = (np.clip(_audio(text, ToneEngine.sample_rate), -1, 1) * 32767).astype("<i2")
    meta = {"engine_seconds": 0.1234, "text": text, "engine": "tone", "model_version": "tone-1",
            "tag": "tone:tone-1", "voice": "preset:tone-low", "mode": "preset", "info": {},
            "expires": None}  # fmt: skip
    return len(pack(CachedAudio.from_pcm("0" * 32, pcm, ToneEngine.sample_rate, meta)))


# -- traces -----------------------------------------------------------------------------


@dataclass
class Trace:
    name: str
    requests: list[int]
    probs: dict[int, float] | None = None
    """True request probabilities, for the oracle (independent-request traces only)."""
    scan_at: int | None = None
    scan: list[int] | None = None


def _zipf_cdf(n: int, s: float) -> list[float]:
    cum, total = [], 0.0
    for r in range(n):
        total += 1.0 / (r + 1) ** s
        cum.append(total)
    return cum


def zipf_trace(s: float, length: int, seed: int) -> Trace:
    rng = random.Random(seed)
    perm = rng.sample(range(N_PHRASES), N_PHRASES)
    cum = _zipf_cdf(N_PHRASES, s)
    reqs = [perm[bisect.bisect_left(cum, rng.random() * cum[-1])] for _ in range(length)]
    probs = {perm[r]: (cum[r] - (cum[r - 1] if r else 0.0)) / cum[-1] for r in range(N_PHRASES)}
    return Trace(f"zipf-{s}", reqs, probs)


def shift_trace(length: int, seed: int, days: int = 6, churn: float = 0.3) -> Trace:
    rng = random.Random(seed + 1000)
    perm = rng.sample(range(N_PHRASES), N_PHRASES)
    cum = _zipf_cdf(N_PHRASES, 1.0)
    fresh = N_PHRASES
    reqs: list[int] = []
    for day in range(days):
        if day:
            for r in range(N_PHRASES):
                if rng.random() < churn:
                    perm[r], fresh = fresh, fresh + 1
        reqs += [perm[bisect.bisect_left(cum, rng.random() * cum[-1])] for _ in range(length // days)]
    return Trace("shift", reqs)


# -- bounds (offline simulations on sizes and costs) ----------------------------------------


def _next_uses(reqs: list[int]) -> list[float]:
    nxt: list[float] = [math.inf] * len(reqs)
    last: dict[int, int] = {}
    for i in range(len(reqs) - 1, -1, -1):
        nxt[i] = last.get(reqs[i], math.inf)
        last[reqs[i]] = i
    return nxt


def belady(reqs: list[int], size: Callable[[int], int], cost: Callable[[int], float], cap: float,
           *, cost_aware: bool) -> tuple[int, float]:  # fmt: skip
    nxt = _next_uses(reqs)
    held: dict[int, float] = {}
    used, hits, saved = 0, 0, 0.0
    for i, k in enumerate(reqs):
        if k in held:
            hits, saved = hits + 1, saved + cost(k)
            held[k] = nxt[i]
            continue
        if nxt[i] == math.inf or size(k) > cap:
            continue
        held[k] = nxt[i]
        used += size(k)
        while used > cap:
            if cost_aware:
                victim = max(held, key=lambda x: (held[x] - i) * size(x) / max(cost(x), 1e-9))
            else:
                victim = max(held, key=lambda x: held[x])
            used -= size(victim)
            del held[victim]
    return hits, saved


def interval_bound(reqs: list[int], size: Callable[[int], int], value: Callable[[int], float], cap: float) -> float:
    last: dict[int, int] = {}
    intervals: list[tuple[float, float]] = []
    for i, k in enumerate(reqs):
        if k in last:
            intervals.append((value(k), size(k) * (i - last[k])))
        last[k] = i
    intervals.sort(key=lambda vw: -vw[0] / vw[1])
    budget, total = cap * len(reqs), 0.0
    for v, w in intervals:
        if w > budget:
            return total + v * budget / w
        budget -= w
        total += v
    return total


def oracle(trace: Trace, size: Callable[[int], int], cost: Callable[[int], float], cap: float,
           *, by_cost: bool) -> tuple[int, float]:  # fmt: skip
    assert trace.probs is not None
    probs = trace.probs
    order = sorted(probs, key=lambda k: -probs[k] * (cost(k) if by_cost else 1.0) / size(k))
    keep, used = set(), 0
    for k in order:
        if used + size(k) <= cap:
            keep.add(k)
            used += size(k)
    held: set[int] = set()
    hits, saved = 0, 0.0
    for k in trace.requests:
        if k in held:
            hits, saved = hits + 1, saved + cost(k)
        elif k in keep:
            held.add(k)
    return hits, saved


# -- fast mode: the same policies without the service (--simulate) -------------------------


def simulate(
    policy: str, trace: Trace, cap: int, size: Callable[[int], int], cost: Callable[[int], float]
) -> list[bool]:
    """Per-request hits of ``policy`` on ``trace`` by bookkeeping alone: the shipped
    :class:`CostAwarePolicy`, or diskcache's two rules re-stated (LRU; LFU by hits since
    stored, oldest first on ties). Entry bytes only (no SQLite pages)."""
    from lib.cache.policy import CostAwarePolicy

    held: dict[int, list[float]] = {}
    used, tick, hits = 0, 0, []
    cost_aware = CostAwarePolicy(limit=cap)
    scan_at = trace.scan_at if trace.scan is not None else -1

    def add(k: int, requested: bool) -> None:
        nonlocal used, tick
        tick += 1
        if policy == "cost-aware":
            free = cap - cost_aware.nbytes()
            if not cost_aware.admits(str(k), size(k), cost(k), requested=requested, free=free):
                return
            cost_aware.added(str(k), size(k), cost(k), requested=requested)
            over = cost_aware.nbytes() - cap
            if over > 0:
                for victim in cost_aware.victims(over, protect=str(k)):
                    cost_aware.removed(victim)
            return
        held[k] = [tick, 0.0, tick]
        used += size(k)
        while used > cap:
            rank = 0 if policy == "least-recently-used" else 1
            victim = min(held, key=lambda x: (held[x][rank], held[x][2]))
            used -= size(victim)
            del held[victim]

    for i, k in enumerate(trace.requests):
        if i == scan_at and trace.scan is not None:
            for j in trace.scan:
                add(j, False)
        present = str(k) in cost_aware if policy == "cost-aware" else k in held
        hits.append(present)
        if present:
            tick += 1
            if policy == "cost-aware":
                cost_aware.hit(str(k))
            else:
                held[k][0], held[k][1] = tick, held[k][1] + 1
        else:
            add(k, True)
    return hits


# -- runs through the real service ----------------------------------------------------------


def run_policy(policy: str, trace: Trace, cap: int, cost_scale: float) -> dict[str, Any]:
    """Play ``trace`` through a fresh service; per-request hit flags and the totals."""
    with tempfile.TemporaryDirectory() as d:
        overrides = {"engine": "tone", "cache.dir": d, "voices.prewarm": False, "cache.memory_bytes": 0,
                     "cache.size_limit": cap, "cache.eviction_policy": policy}  # fmt: skip
        svc = TTSService(load_config(env={}, overrides=overrides), BenchEngine(cost_scale))
        hits: list[bool] = []
        saved = 0.0
        started = time.perf_counter()
        try:
            for i, k in enumerate(trace.requests):
                if trace.scan is not None and i == trace.scan_at:
                    items = [PhraseRequest(f"scan[{j}]", phrase_text(j), voice="tone-low")
                             for j in trace.scan]  # fmt: skip
                    preload(svc, items, caller=LOCAL)
                    svc.cache.flush()
                text = phrase_text(k)
                result = svc.synthesise(TTSRequest(text=text, voice="tone-low"))
                svc.cache.flush()  # the write lands before the next request, as with a pause between them
                hit = result.cache == "HIT"
                hits.append(hit)
                saved += model_cost(text) if hit else 0.0
            measured = (
                svc.dashboard.snapshot(top=0, caller=LOCAL)["engine_seconds_saved"] / cost_scale if cost_scale else 0.0
            )
            on_disk = svc.cache.store.stats()["bytes"]
        finally:
            svc.close()
    return {"hits": hits, "saved": saved, "measured_saved": measured, "bytes": on_disk,
            "seconds": time.perf_counter() - started}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed+seeds-1")
    parser.add_argument("--length", type=int, default=12_000)
    parser.add_argument("--cost-scale", type=float, default=0.02, help="engine sleep per modelled engine second")
    parser.add_argument("--shares", default="0.05,0.2")
    parser.add_argument("--traces", default="zipf-0.8,zipf-1.0,zipf-1.2,shift,scan")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--quick", action="store_true", help="2,000 requests, one seed (a smoke test)")
    parser.add_argument("--calibrate", action="store_true", help="measure the built-in engine and exit")
    parser.add_argument("--simulate", action="store_true", help="bookkeeping only, no service (fast; a cross-check)")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
        return
    if args.quick:
        args.seeds, args.length = 1, 2000
    shares = [float(x) for x in args.shares.split(",")]
    policies = args.policies.split(",")
    names = args.traces.split(",")
    print(f"bench_hitrate: {time.strftime('%Y-%m-%d')}, {args.length} requests, {N_PHRASES} phrases, "
          f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, cost scale {args.cost_scale}")  # fmt: skip
    sizes: dict[int, int] = {}

    def size(k: int) -> int:
        if k not in sizes:
            sizes[k] = entry_bytes(phrase_text(k))
        return sizes[k]

    def cost(k: int) -> float:
        return model_cost(phrase_text(k))

    mean_size = statistics.mean(size(k) for k in range(N_PHRASES))
    mean_cost = statistics.mean(cost(k) for k in range(N_PHRASES))
    print(f"mean entry {mean_size / 1024:.1f} KiB; mean engine cost {mean_cost:.3f} s")
    rows: dict[tuple[str, float], dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    scan_rows: dict[float, dict[str, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    base_runs: dict[tuple[int, float, str], dict[str, Any]] = {}
    for name in names:  # one trace at a time, its table printed when done
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for share in shares:
                cap = int(share * N_PHRASES * mean_size)
                if name == "scan":
                    trace = zipf_trace(1.0, args.length, seed)
                    trace.name, trace.scan_at = "scan", args.length // 2
                    n_scan = int(10 * share * N_PHRASES)
                    trace.scan = list(range(10**6 + seed * 10**5, 10**6 + seed * 10**5 + n_scan))
                elif name == "shift":
                    trace = shift_trace(args.length, seed)
                else:
                    trace = zipf_trace(float(name.split("-")[1]), args.length, seed)
                reqs = trace.requests
                n = len(reqs)
                row = rows[(name, share)]
                if name != "scan":
                    b = belady(reqs, size, cost, cap, cost_aware=False)
                    bc = belady(reqs, size, cost, cap, cost_aware=True)
                    row["belady"].append((b[0] / n, b[1]))
                    row["belady-cost"].append((bc[0] / n, bc[1]))
                    row["upper"].append((interval_bound(reqs, size, lambda k: 1.0, cap) / n,
                                         interval_bound(reqs, size, cost, cap)))  # fmt: skip
                    if trace.probs is not None:
                        oc = oracle(trace, size, cost, cap, by_cost=False)
                        oe = oracle(trace, size, cost, cap, by_cost=True)
                        row["oracle (count)"].append((oc[0] / n, oc[1]))
                        row["oracle (cost)"].append((oe[0] / n, oe[1]))
                for policy in policies:
                    if args.simulate:
                        flags = simulate(policy, trace, cap, size, cost)
                        result = {"hits": flags, "saved": sum(cost(k) for k, h in zip(reqs, flags, strict=True) if h),
                                  "measured_saved": 0.0, "bytes": 0, "seconds": 0.0}  # fmt: skip
                    else:
                        result = run_policy(policy, trace, cap, args.cost_scale)
                    row[policy].append((sum(result["hits"]) / n, result["saved"]))
                    print(f"  seed {seed} {share:.0%} {name:9s} {policy:22s} hit {sum(result['hits']) / n:.3f} "
                          f"saved {result['saved']:.1f} s (measured {result['measured_saved']:.1f}) "
                          f"disk {result['bytes'] / cap:.2f} of limit, {result['seconds']:.0f} s",
                          flush=True)  # fmt: skip
                    if name == "zipf-1.0":
                        base_runs[(seed, share, policy)] = result
                    if name == "scan" and (seed, share, policy) in base_runs:
                        at = trace.scan_at or 0
                        post = statistics.mean(result["hits"][at : at + 1000])
                        pre = statistics.mean(result["hits"][at - 1000 : at])
                        ctl = statistics.mean(base_runs[(seed, share, policy)]["hits"][at : at + 1000])
                        scan_rows[share][policy].append((pre, post, ctl))
        print_tables({k: v for k, v in rows.items() if k[0] == name}, scan_rows if name == "scan" else {}, args.seeds)


def print_tables(rows: Any, scan_rows: Any, seeds: int) -> None:
    print(f"\nMedians over {seeds} seeds. hit = hit rate; saved = engine seconds saved (modelled costs).")
    for (name, share), row in rows.items():
        if name == "scan":
            continue
        ref_hit = statistics.median(h for h, _ in row["belady"])
        ref_up = statistics.median(s for _, s in row["upper"])
        ref_bc = statistics.median(s for _, s in row["belady-cost"])
        print(f"\n{name} at {share:.0%} capacity")
        print("| policy | hit rate | % of belady | engine s saved | % of upper bound | % of belady-cost |")
        print("|---|---|---|---|---|---|")
        for policy, vals in row.items():
            hit = statistics.median(h for h, _ in vals)
            sv = statistics.median(s for _, s in vals)
            print(f"| {policy} | {hit:.3f} | {100 * hit / ref_hit:.1f} | {sv:.1f} | {100 * sv / ref_up:.1f} "
                  f"| {100 * sv / ref_bc:.1f} |")  # fmt: skip
    for share, per in scan_rows.items():
        print(f"\nscan at {share:.0%} capacity: hit rate of the 1,000 user requests before / after the preload, "
              "and of the same 1,000 without it")  # fmt: skip
        print("| policy | before | after | same requests, no scan | after - no scan |")
        print("|---|---|---|---|---|")
        for policy, vals in per.items():
            pre = statistics.median(v[0] for v in vals)
            post = statistics.median(v[1] for v in vals)
            ctl = statistics.median(v[2] for v in vals)
            diff = statistics.median(v[1] - v[2] for v in vals)
            print(f"| {policy} | {pre:.3f} | {post:.3f} | {ctl:.3f} | {100 * diff:+.1f} pts |")


def calibrate() -> None:
    """Durations, entry sizes and engine seconds of the built-in engine on a clone."""
    from scipy.signal import resample_poly

    from lib.engines.builtin import BuiltinEngine

    engine = BuiltinEngine()
    prompt = engine.synthesise("我们今天下午一起去公园散步，那里的风景非常美丽，希望你以后能够做的比我还好。",
                               engine.preset_voice("zh-male"), style="", seed=0, speed=1.0, mode="preset")  # fmt: skip
    voice = engine.extract_voice((resample_poly(prompt.audio, 160, 221) * 32767).astype("int16"), "")
    print("| text | chars | audio s | engine s | entry bytes |")
    print("|---|---|---|---|---|")
    for i in range(24):
        text = phrase_text(i)
        t = time.perf_counter()
        out = engine.synthesise(text, voice, style="", seed=0, speed=1.0, mode="cross_lingual")
        spent = time.perf_counter() - t
        pcm = (np.clip(out.audio, -1, 1) * 32767).astype("<i2")
        blob = pack(CachedAudio.from_pcm("0" * 32, pcm, engine.sample_rate, {"engine_seconds": spent}))
        print(f"| {text[:12]}… | {len(text)} | {pcm.size / engine.sample_rate:.2f} | {spent:.3f} | {len(blob)} |")


if __name__ == "__main__":
    main()
