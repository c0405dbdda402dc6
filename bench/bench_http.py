"""HTTP hit latency and throughput of ``POST /api/tts`` and ``GET /api/audio/{key}.wav``.

Starts the API server (``python -m lib.api``) in its own process on a free loopback
port, makes one 5 s clip in a preset voice and one in an uploaded prompt recording
(``--prompt``; default the shared 13.75 s male prompt, 592 KiB: its first request is a
MISS and decodes it), then drives cache hits from a load generator in a second process
(asyncio, raw HTTP/1.1 keep-alive connections, so the client costs little) at 1, 8 and 64
concurrent clients, and prints p50/p99 latency and requests/s.

    python bench/bench_http.py [--seconds 5] [--engine tone|builtin] [--clients 1,8,64]
    python bench/bench_http.py --compare-bare [--rounds 3] [--prompt FILE]

Targets on the 2-core reference machine: hit p50 <= 5 ms at 1 client; >= 1,000
requests/s for /api/audio at 64 clients with no errors.

``--compare-bare`` also starts ``bench/bare_server.py`` (a bare FastAPI endpoint doing
the least work for the same request: GET answers the same bytes from memory, POST parses
the same multipart upload and answers the same bytes; on the same uvicorn settings as
the API, ``lib.api.serving``) and measures both servers in
alternation, ``--rounds`` times, printing medians and the ratios the architecture issue
sets: ``/api/audio`` throughput at 64 connections >= 85 % of the bare endpoint's, and
``/api/tts`` hit p50 at one connection <= 1.3x the bare POST's, in a named voice and with
a prompt recording in the form (the bare POST parses the same multipart). *app/bare* is the ratio
of the medians; *paired* the median of each round's ratio (the two servers of a round
run seconds apart, so it is the steadier one on a busy machine: prefer many short rounds,
e.g. ``--rounds 11 --seconds 2``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOUNDARY = "benchboundary"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]] | None = None) -> bytes:
    """A multipart form: text ``fields``, and ``files`` as ``name: (filename, bytes)``."""
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    body = "".join(parts).encode()
    for name, (filename, data) in (files or {}).items():
        head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        )
        body += head.encode() + data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


#: Real recordings (``$TTS_TESTDATA_DIR``, else ``../shared/testdata/voices``); the prompt of
#: the uploaded-prompt step (``--prompt``) is one of them when they are there.
TESTDATA = Path(os.environ.get("TTS_TESTDATA_DIR") or ROOT.parent / "shared" / "testdata" / "voices")


def prompt_bytes(path: str | None) -> tuple[str, bytes]:
    """The prompt recording the uploaded-prompt step sends: ``path``, else the shared
    13.75 s male prompt (606 KB, 22.05 kHz 16-bit WAV), else a tone of the same size."""
    chosen = Path(path) if path else TESTDATA / "male_prompt.wav"
    if chosen.is_file():
        return chosen.name, chosen.read_bytes()
    if path:
        raise SystemExit(f"--prompt: {path} is not a file")
    import io

    import numpy as np
    import soundfile as sf

    t = np.arange(int(13.75 * 22_050)) / 22_050
    buf = io.BytesIO()
    sf.write(buf, 0.3 * np.sin(2 * np.pi * 143 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)), 22_050, format="WAV")
    return "tone.wav", buf.getvalue()


def build_request(method: str, path: str, body: bytes = b"", content_type: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n"
    if body:
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def _client(port: int, request: bytes, stop_at: float, latencies: list[float], errors: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                errors.append(status)
    except (OSError, asyncio.IncompleteReadError):
        errors.append(-1)
    finally:
        writer.close()


def load(port: int, request: bytes, clients: int, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """Runs in the load-generator process."""
    latencies: list[float] = []
    errors: list[int] = []

    async def main() -> float:
        stop_at = time.perf_counter() + seconds
        started = time.perf_counter()
        await asyncio.gather(*(_client(port, request, stop_at, latencies, errors) for _ in range(clients)))
        return time.perf_counter() - started

    elapsed = asyncio.run(main())
    out.put({"latencies": latencies, "errors": len(errors), "elapsed": elapsed})


def run_load(port: int, request: bytes, clients: int, seconds: float) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    proc = ctx.Process(target=load, args=(port, request, clients, seconds, queue))
    proc.start()
    result = queue.get(timeout=seconds + 120)
    proc.join(timeout=30)
    lat = sorted(result["latencies"])
    n = len(lat)
    return {
        "requests": n,
        "rps": n / result["elapsed"],
        "p50_ms": statistics.median(lat) * 1e3 if n else float("nan"),
        "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1e3 if n else float("nan"),
        "errors": result["errors"],
    }


def start_bare(clip: bytes) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    body_file = Path(tempfile.mkdtemp(prefix="bench-bare-")) / "body.wav"
    body_file.write_bytes(clip)
    # From the repository, as the API server runs: the same config.yaml, so the same server settings.
    command = [sys.executable, str(ROOT / "bench" / "bare_server.py"), str(port), str(body_file)]
    proc = subprocess.Popen(command, cwd=ROOT)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the bare server did not start") from None
            time.sleep(0.1)


def compare_bare(port: int, steps: list[tuple[str, bytes]], clip: bytes, args: argparse.Namespace) -> int:
    """Both servers, alternating, ``args.rounds`` times; medians and ratios."""
    bare, bare_port = start_bare(clip)
    try:
        cases = [(steps[0], 1, "p50_ms"), (steps[1], 64, "rps"), (steps[0], 64, "rps"), (steps[1], 1, "p50_ms")]
        cases.append((steps[2], 1, "p50_ms"))
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'endpoint':28} {'clients':>7} {'measure':>8} {'app':>9} {'bare':>9} {'app/bare':>9} {'paired':>7}")
        for (name, raw), clients, measure in cases:
            ours: list[float] = []
            floor: list[float] = []
            for _ in range(args.rounds):
                ours.append(run_load(port, raw, clients, args.seconds)[measure])
                floor.append(run_load(bare_port, raw, clients, args.seconds)[measure])
            a, b = statistics.median(ours), statistics.median(floor)
            # The median of each round's ratio as well: both servers of a round ran within
            # seconds of each other, so a burst of load elsewhere hits both.
            paired = statistics.median(x / y for x, y in zip(ours, floor, strict=True))
            print(f"{name:28} {clients:7d} {measure:>8} {a:9.2f} {b:9.2f} {a / b:9.2f} {paired:7.2f}")
            if args.json:
                row = {"endpoint": name, "clients": clients, "measure": measure, "app": ours, "bare": floor}
                print(json.dumps(row))
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 0
    finally:
        bare.terminate()
        bare.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each load step")
    parser.add_argument("--engine", default="tone", help="engine of the server (the hits do not call it)")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--json", action="store_true", help="print one JSON line per step as well")
    parser.add_argument("--compare-bare", action="store_true", help="measure beside a bare FastAPI endpoint")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds with --compare-bare")
    parser.add_argument("--prompt", help="the recording of the uploaded-prompt step (default: the shared male prompt)")
    args = parser.parse_args()
    port = free_port()
    cache = tempfile.mkdtemp(prefix="bench-http-")
    env = dict(os.environ, TTS_VOICES_PREWARM="false", PYTHONPATH=str(ROOT))
    server = subprocess.Popen(
        [sys.executable, "-m", "lib.api", "--engine", args.engine, "--cache-dir", cache, "--port", str(port),
         "--log-level", "warning"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
                    voices = json.load(urllib.request.urlopen(f"{base}/api/voices"))["voices"]
                    health = json.load(r)
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print("server did not start", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        voice = next(v["name"] for v in voices if v["kind"] == "preset")
        # The tone engine speaks 60 ms per character: 84 characters make a 5 s clip.
        text = "Passengers for the five fifteen train to Shanghai, please proceed to gate seven now."
        body = multipart({"text": text, "voice": voice})
        ctype = f"multipart/form-data; boundary={BOUNDARY}"
        req = urllib.request.Request(f"{base}/api/tts", data=body, headers={"Content-Type": ctype})
        with urllib.request.urlopen(req) as r:
            key, first, clip = r.headers["X-Cache-Key"], r.headers["X-Cache"], r.read()
        seconds = (len(clip) - 44) / 2 / 22050
        print(f"engine {health['engine']}; clip {seconds:.2f} s, {len(clip) / 1024:.0f} KiB WAV; first request {first}")
        # A hit whose request carries a prompt recording: its first request is the MISS.
        name, recording = prompt_bytes(args.prompt)
        upload = multipart({"text": text}, {"prompt_audio": (name, recording)})
        req = urllib.request.Request(f"{base}/api/tts", data=upload, headers={"Content-Type": ctype})
        with urllib.request.urlopen(req) as r:
            first_upload = r.headers["X-Cache"]
        print(
            f"prompt {name}, {len(recording) / 1024:.0f} KiB, form {len(upload) / 1024:.0f} KiB; first {first_upload}"
        )
        steps = [
            ("POST /api/tts (hit)", build_request("POST", "/api/tts", body, ctype)),
            ("GET /api/audio/{key}.wav", build_request("GET", f"/api/audio/{key}.wav")),
            ("POST /api/tts (hit, prompt)", build_request("POST", "/api/tts", upload, ctype)),
        ]
        if args.compare_bare:
            return compare_bare(port, steps, clip, args)
        print(f"{'endpoint':28} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
        for name, raw in steps:
            for clients in (int(c) for c in args.clients.split(",")):
                r2 = run_load(port, raw, clients, args.seconds)
                print(
                    f"{name:28} {clients:7d} {r2['rps']:9.0f} {r2['p50_ms']:8.2f} {r2['p99_ms']:8.2f} {r2['errors']:6d}"
                )
                if args.json:
                    print(json.dumps({"endpoint": name, "clients": clients, **r2}))
        return 0
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
