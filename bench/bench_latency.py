"""The latency table serving projects publish: time to first audio and to the last byte,
p50/p95, of hits and misses at 1, 4 and 8 concurrent clients, per base voice.

Starts the API server (``python -m lib.api``, the built-in engine) on a free loopback port
with a fresh cache, once per ``--bases`` entry (``kokoro``, ``espeak``), and drives it with
``--concurrency`` clients in threads (``http.client``, one connection each). Every request
is ``POST /api/tts`` with ``stream=true`` and ``format=pcm`` (so the first body byte is the
first audio sample: no container header to send first):

- **misses**: one-sentence announcements never asked before (a station's and a bank's,
  Mandarin and English, 5-8 s of speech each, numbers varied so that each is new),
  ``--misses`` per client count (at least 6);
- **hits**: the same announcements again, for ``--seconds`` per client count.

Prints one JSON line per (base, kind, clients): ``ttfa_p50_ms``, ``ttfa_p95_ms`` (time to
first audio), ``last_p50_ms``, ``last_p95_ms`` (time to the last byte), ``n``, and for
misses ``first_fraction_p50`` (time to first audio over time to the last byte: a streamed
one-sentence miss sends its first audio at this fraction of its whole synthesis; also per
language, ``first_fraction_p50_zh`` / ``_en``) and
``rtf_p50`` (wall seconds of synthesis per second of audio). Record it with
``bench/record.py bench_latency.py`` (bench/results/).

    python bench/bench_latency.py [--bases kokoro,espeak] [--concurrency 1,4,8] [--misses 8] [--seconds 5] [--held]

``--held`` uses four other announcement shapes (two per language), never used while the
pieces were tuned, for a held-out first-audio figure.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_ZH = "请{letter}{num:03d}号顾客到{window}号窗口办理业务，办理前请准备好您的身份证件，谢谢。"
_EN = "Passengers for train {num}, please go to platform {window}, the train leaves in {mins} minutes."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: ``--held``: announcements of other shapes, never used while the pieces were tuned (the
#: two above were close to one of those sentences), for a held-out first-audio figure.
_HELD_ZH = (
    "各位旅客请注意，由{city}开往{city2}的G{num}次列车现在开始检票，请到{window}号检票口上车。",
    "尊敬的顾客您好，本店将于{hour}点{mins}分打烊，请您抓紧时间选购，祝您购物愉快。",
)
_HELD_EN = (
    "Attention please, the {num} service to the airport is delayed by {mins} minutes, we apologise for the delay.",
    "Customer number {num}, your order is ready at counter {window}, thank you for shopping with us today.",
)
_CITIES = ("北京", "上海", "广州", "深圳", "杭州", "南京", "武汉", "成都", "西安")


def held_announcements(count: int, salt: int) -> list[tuple[str, str]]:
    """``count`` new (text, voice) pairs of the held-out shapes, alternating languages."""
    out = []
    for i in range(count):
        n = salt * 1000 + i
        shape = (i // 2) % 2
        if i % 2 == 0:
            city, city2 = _CITIES[n % 9], _CITIES[(n + 4) % 9]
            text = _HELD_ZH[shape].format(city=city, city2=city2, num=n % 997, window=n % 20 + 1,
                                          hour=n % 4 + 8, mins=n % 50 + 10)  # fmt: skip
            out.append((text, "zh-female"))
        else:
            out.append((_HELD_EN[shape].format(num=100 + n % 899, window=n % 12 + 1, mins=n % 50 + 5), "en-female"))
    return out


def announcements(count: int, salt: int) -> list[tuple[str, str]]:
    """``count`` new (text, voice) pairs, alternating Mandarin and English."""
    out = []
    for i in range(count):
        n = salt * 1000 + i
        if i % 2 == 0:
            text = _ZH.format(letter="ABCDEFGH"[n % 8], num=n % 997, window=n % 9 + 1)
            out.append((text, "zh-female"))
        else:
            out.append((_EN.format(num=100 + n % 899, window=n % 12 + 1, mins=n % 50 + 2), "en-female"))
    return out


def start(base: str, cache: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = dict(os.environ, TTS_VOICES_PREWARM="false", TTS_BUILTIN_BASE=base, PYTHONPATH=str(ROOT))
    for name in ("SYNTH_CHARS_PER_HOUR", "REQUESTS_PER_MINUTE", "CONCURRENT_MISSES"):
        env[f"TTS_TENANTS_ANONYMOUS_{name}"] = "null"  # the bench is one anonymous address
    server = subprocess.Popen(
        [sys.executable, "-m", "lib.api", "--engine", "builtin", "--cache-dir", cache, "--port", str(port),
         "--log-level", "warning"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                json.load(r)
                return server, port
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit(f"the server ({base}) did not start") from None
            time.sleep(0.5)


def timed(port: int, text: str, voice: str) -> dict[str, Any]:
    """One streamed request: seconds to the first audio byte and to the last, and the cache result."""
    body = urllib.parse.urlencode({"text": text, "voice": voice, "stream": "true", "format": "pcm"})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        t0 = time.perf_counter()
        conn.request("POST", "/api/tts", body, {"Content-Type": "application/x-www-form-urlencoded"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{resp.status}: {resp.read()[:200]!r}")
        first = resp.read1(65536)
        t_first = time.perf_counter() - t0
        size = len(first)
        while chunk := resp.read1(65536):
            size += len(chunk)
        t_last = time.perf_counter() - t0
        rate = int(resp.headers.get("X-Sample-Rate", "24000"))
        return {"first": t_first, "last": t_last, "cache": resp.headers.get("X-Cache"), "audio": size / 2 / rate}
    finally:
        conn.close()


def run(port: int, jobs: list[tuple[str, str]], clients: int, seconds: float | None) -> list[dict[str, Any]]:
    """``jobs`` by ``clients`` threads (each job once), or, with ``seconds``, the jobs over and over."""
    work: queue.Queue[tuple[str, str]] = queue.Queue()
    for job in jobs:
        work.put(job)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds if seconds else None

    def client() -> None:
        i = 0
        while True:
            if stop_at is None:
                try:
                    text, voice = work.get_nowait()
                except queue.Empty:
                    return
            else:
                if time.perf_counter() >= stop_at:
                    return
                text, voice = jobs[i % len(jobs)]
                i += 1
            done = timed(port, text, voice)
            done["lang"] = voice.split("-")[0]
            with lock:
                results.append(done)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(base: str, kind: str, clients: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    firsts = [r["first"] * 1e3 for r in results]
    lasts = [r["last"] * 1e3 for r in results]
    row: dict[str, Any] = {
        "base": base, "kind": kind, "clients": clients, "n": len(results),
        "ttfa_p50_ms": round(statistics.median(firsts), 1), "ttfa_p95_ms": round(pct(firsts, 0.95), 1),
        "last_p50_ms": round(statistics.median(lasts), 1), "last_p95_ms": round(pct(lasts, 0.95), 1),
        "caches": sorted({str(r["cache"]) for r in results}),
    }  # fmt: skip
    if kind == "miss":
        row["first_fraction_p50"] = round(statistics.median(r["first"] / r["last"] for r in results), 3)
        for lang in sorted({str(r.get("lang")) for r in results}):
            mine = [r["first"] / r["last"] for r in results if r.get("lang") == lang]
            row[f"first_fraction_p50_{lang}"] = round(statistics.median(mine), 3)
        row["rtf_p50"] = round(statistics.median(r["last"] / max(r["audio"], 1e-3) for r in results), 3)
        row["audio_s_p50"] = round(statistics.median(r["audio"] for r in results), 2)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", default="kokoro,espeak")
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--misses", type=int, default=8, help="new announcements per client count (at least 6)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of hits per client count")
    parser.add_argument("--held", action="store_true", help="announcements of the held-out shapes (see _HELD_ZH)")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    for base in args.bases.split(","):
        cache = tempfile.mkdtemp(prefix=f"bench-latency-{base}-")
        server, port = start(base, cache)
        try:
            timed(port, "预热。", "zh-female")  # the model loads on the first call: not in the figures
            timed(port, "Warm up.", "en-female")
            for salt, clients in enumerate(levels, start=1):
                jobs = (held_announcements if args.held else announcements)(max(6, args.misses, clients), salt)
                print(json.dumps(summary(base, "miss", clients, run(port, jobs, clients, None))), flush=True)
                print(json.dumps(summary(base, "hit", clients, run(port, jobs, clients, args.seconds))), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)
    print(json.dumps({"machine": {"cores": os.cpu_count()}, "note": "ttfa: first audio byte of a streamed pcm answer"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
