"""Hit latency of ``POST /api/tts`` with and without an approved take, in the same run.

Starts the API server (``python -m lib.api``, tone engine, a fresh cache) in its own
process, makes two phrases of the same length, renders three takes of the first and
approves one (``POST /api/takes``, ``POST /api/takes/approve``: loopback is the admin
without a token), then measures unseeded cache hits of both phrases -- the approved one
(answered its approved take, ``X-Take: approved``) and the other (seed 0's render) -- in
alternation, ``--rounds`` times, from a load generator in another process (raw HTTP/1.1
keep-alive, ``bench/bench_http.py``'s), and prints each round's p50, the medians, their
ratio and the median of the per-round ratios (the steadier one on a busy machine).

    python bench/bench_takes.py [--rounds 7] [--seconds 2] [--clients 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import urllib.request
from pathlib import Path

from api_server import api_server
from bench_http import BOUNDARY, build_request, multipart, run_load

ROOT = Path(__file__).resolve().parents[1]
# Same length, so the two clips are the same size (the tone engine: 60 ms a character).
APPROVED = "Passengers for the five fifteen train to Shanghai, please proceed to gate seven now."
PLAIN = "Passengers for the five fifteen train to Hangzhou, please proceed to gate eight now."


def post(base: str, path: str, fields: dict[str, str]) -> tuple[dict[str, str], bytes]:
    """The answer's headers (lower-case names) and body."""
    body = multipart(fields)
    req = urllib.request.Request(
        base + path, data=body, headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return {k.lower(): v for k, v in r.headers.items()}, r.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each measurement")
    parser.add_argument("--clients", type=int, default=1)
    args = parser.parse_args()
    with api_server("tone", clean_env=True) as base:
        port = int(base.rsplit(":", 1)[1])
        voice = "tone-low"
        _, raw = post(base, "/api/takes", {"text": APPROVED, "voice": voice, "n": "3"})
        takes = json.loads(raw)["takes"]
        approved_key = takes[1]["key"]
        _, raw = post(base, "/api/takes/approve", {"key": approved_key})
        assert json.loads(raw)["approved"]["key"] == approved_key
        post(base, "/api/tts", {"text": PLAIN, "voice": voice})  # the other phrase's MISS
        requests = {}
        for name, text in (("approved", APPROVED), ("plain", PLAIN)):
            headers, _ = post(base, "/api/tts", {"text": text, "voice": voice})
            take = headers.get("x-take", "-")
            print(f"{name:9} X-Cache {headers['x-cache']}, X-Take {take}, key {headers['x-cache-key'][:8]}")
            body = multipart({"text": text, "voice": voice})
            requests[name] = build_request("POST", "/api/tts", body, f"multipart/form-data; boundary={BOUNDARY}")
        print(f"{'round':>5} {'approved p50 ms':>16} {'plain p50 ms':>13} {'ratio':>6}")
        with_take: list[float] = []
        without: list[float] = []
        for i in range(args.rounds):
            order = ("approved", "plain") if i % 2 == 0 else ("plain", "approved")  # neither always first
            got = {name: run_load(port, requests[name], args.clients, args.seconds) for name in order}
            errors = got["approved"]["errors"] + got["plain"]["errors"]
            if errors:
                print(f"round {i}: {errors} errors", file=sys.stderr)
                return 1
            with_take.append(got["approved"]["p50_ms"])
            without.append(got["plain"]["p50_ms"])
            print(f"{i:5d} {with_take[-1]:16.3f} {without[-1]:13.3f} {with_take[-1] / without[-1]:6.3f}")
        a, p = statistics.median(with_take), statistics.median(without)
        paired = statistics.median(x / y for x, y in zip(with_take, without, strict=True))
        print(
            f"median hit p50 at {args.clients} client(s): approved {a:.3f} ms, not approved {p:.3f} ms; "
            f"ratio of medians {a / p:.3f}, median of per-round ratios {paired:.3f} ({args.rounds} rounds)"
        )
        return 0


if __name__ == "__main__":
    sys.exit(main())
