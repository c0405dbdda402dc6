"""Both cores for misses: one synthesis with 2 intra-op threads against two at once with 1
thread each (issue 36, item 2), on the Kokoro base with a clone's matching on top.

    .venv/bin/python bench/record.py bench_threads.py              # about 8 min on 2 cores
    .venv/bin/python bench/record.py bench_threads.py --runs 1     # a quick look

Each layout runs in a fresh process (``builtin.threads`` is fixed when the model loads),
the model loaded and the first calls not timed; the work is the 9 sentences of
``bench_voice.py`` (3 Mandarin, 6 English), cloned from ``zh_female_prompt`` in
cross-lingual mode, seed varied per run so that nothing is memoised:

- ``2 threads, 1 at a time``: what one operator's miss gets on an idle server;
- ``2 threads, 2 at once``: two misses at once in one process (the server's and
  ``preload_cache.py --workers 2``'s layout with the default threads);
- ``1 thread, 1 at a time`` and ``1 thread, 2 at once``: ``builtin.threads: 1``.

Per layout, medians over runs: wall seconds per second of audio of one miss (latency: what
a caller waits, the real-time factor), audio seconds made per wall second (throughput: what
a preload gets), CPU seconds per second of audio, the process's RSS and peak RSS. Each line
printed is one JSON object (``bench/record.py`` keeps them); the load average before and
after says how busy the machine was.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import json, os, statistics, sys, threading, time
sys.path.insert(0, {repo!r})
from bench.bench_voice import EN, ZH, load_pcm, proc_mb as status
from lib.config import BuiltinConfig
from lib.engines.builtin import BuiltinEngine
engine = BuiltinEngine(BuiltinConfig(base="kokoro", threads={threads}))
engine.warm()
voice = engine.extract_voice(load_pcm("zh_female_prompt"), "")
texts = ZH + EN
for text in texts[:4]:  # the first calls (allocations, caches) are not timed
    engine.synthesise(text, voice, style="", seed=0, speed=1.0, mode="cross_lingual")
load_before = os.getloadavg()[0]
rtfs, throughputs, cpus = [], [], []
for run in range({runs}):
    lanes = [texts[i::{at_once}] for i in range({at_once})]
    walls, audio = [], [0.0]
    lock = threading.Lock()
    def lane(items, seed):
        for text in items:
            t = time.perf_counter()
            result = engine.synthesise(text, voice, style="", seed=seed, speed=1.0, mode="cross_lingual")
            wall = time.perf_counter() - t
            seconds = result.audio.size / engine.sample_rate
            with lock:
                walls.append(wall / seconds)
                audio[0] += seconds
    t, c = time.perf_counter(), time.process_time()
    workers = [threading.Thread(target=lane, args=(items, run + 1)) for items in lanes]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    rtfs.append(statistics.median(walls))
    throughputs.append(audio[0] / wall)
    cpus.append(cpu / audio[0])
print(json.dumps({{"threads": {threads}, "at_once": {at_once}, "runs": {runs},
                  "rtf_p50": statistics.median(rtfs), "throughput": statistics.median(throughputs),
                  "cpu_per_audio_s": statistics.median(cpus), "rss_mb": status("VmRSS:"),
                  "peak_rss_mb": status("VmHWM:"),
                  "audio_s": audio[0], "load_before": load_before, "load_after": os.getloadavg()[0]}}))
engine.close()
"""

LAYOUTS = ((2, 1), (2, 2), (1, 1), (1, 2))


def layout(threads: int, at_once: int, runs: int) -> dict[str, Any]:
    code = _CHILD.format(repo=str(REPO), threads=threads, at_once=at_once, runs=runs)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per layout (default 3; medians over them)")
    args = parser.parse_args()
    rows = []
    for threads, at_once in LAYOUTS:
        row = layout(threads, at_once, args.runs)
        rows.append(row)
        print(json.dumps(row), flush=True)
        print(f"# {threads} thread(s), {at_once} at a time: miss RTF p50 {row['rtf_p50']:.3f}, "
              f"throughput {row['throughput']:.2f} audio s per s, CPU {row['cpu_per_audio_s']:.2f} s per audio s, "
              f"RSS {row['rss_mb']:.0f} MB (peak {row['peak_rss_mb']:.0f}); "
              f"load {row['load_before']:.2f} -> {row['load_after']:.2f}", flush=True)  # fmt: skip
    base = rows[0]
    for row in rows[1:]:
        latency, throughput = row["rtf_p50"] / base["rtf_p50"], row["throughput"] / base["throughput"]
        print(f"# vs 2 threads 1 at a time: {row['threads']} thread(s) {row['at_once']} at a time: "
              f"latency x{latency:.2f}, throughput x{throughput:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
