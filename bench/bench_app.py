"""The app's own cost per hit, beside the bare floor's, without a server or a socket.

``bench_http.py --compare-bare`` measures what a client sees, through uvicorn and the
loopback; on a busy 2-core machine its 1-connection latencies jump between two levels
(scheduling, not the app), which blurs a 10 % difference. This calls the two ASGI apps
directly (the API of ``lib.api.create_app`` over a tone-engine service, and
``bench/bare_server.py``'s) with the same requests -- a ``POST /api/tts`` hit and a
``GET /api/audio/{key}.wav`` and a ``POST /api/tts`` hit carrying a prompt recording
(``--prompt``) -- in alternating rounds, and prints the median
microseconds per request and their ratio. ``--no-fast-path`` measures the API with every
request left to the endpoints (``create_app(fast_path=False)``).

    python bench/bench_app.py [--rounds 5] [--requests 2000] [--no-fast-path] [--prompt FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bare_server import create as create_bare  # noqa: E402
from bench_http import BOUNDARY, multipart, prompt_bytes  # noqa: E402

Headers = list[tuple[bytes, bytes]]


async def call(app: Any, method: str, path: str, headers: Headers, body: bytes = b"") -> list[dict[str, Any]]:
    """One request straight into the ASGI app; the messages it sent."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80), "state": {},
    }  # fmt: skip
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def per_request(app: Any, method: str, path: str, headers: Headers, body: bytes, n: int) -> float:
    """Median microseconds of ``n`` requests (after a warm-up)."""
    for _ in range(n // 10):
        await call(app, method, path, headers, body)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        sent = await call(app, method, path, headers, body)
        times.append(time.perf_counter() - started)
    if sent[0]["status"] != 200:
        raise RuntimeError(f"{method} {path}: {sent[0]['status']}")
    return statistics.median(times) * 1e6


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000, help="requests per round and endpoint")
    parser.add_argument("--no-fast-path", action="store_true", help="leave every request to the endpoints")
    parser.add_argument("--prompt", help="the recording of the uploaded-prompt step (default: the shared male prompt)")
    args = parser.parse_args()
    os.environ.setdefault("TTS_VOICES_PREWARM", "false")
    from lib.api import create_app
    from lib.config import load_config
    from lib.pipeline.service import TTSService
    from lib.request.access import LOCAL

    config = load_config(env={}, overrides={"engine": "tone", "cache.dir": tempfile.mkdtemp(prefix="bench-app-")})
    service = TTSService(config)
    try:
        app = create_app(service, fast_path=False) if args.no_fast_path else create_app(service)
        voice = next(v["name"] for v in service.voices.list(caller=LOCAL) if v["kind"] == "preset")
        text = "Passengers for the five fifteen train to Shanghai, please proceed to gate seven now."
        form = multipart({"text": text, "voice": voice})
        post: Headers = [
            (b"host", b"bench"),
            (b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode()),
            (b"content-length", str(len(form)).encode()),
        ]
        first = await call(app, "POST", "/api/tts", post, form)  # the MISS that makes the entry
        key = dict(first[0]["headers"])[b"x-cache-key"].decode()
        bare = create_bare(first[1]["body"])
        name, recording = prompt_bytes(args.prompt)
        upload = multipart({"text": text}, {"prompt_audio": (name, recording)})
        with_prompt = [*post[:2], (b"content-length", str(len(upload)).encode())]
        made = await call(app, "POST", "/api/tts", with_prompt, upload)  # its MISS
        if made[0]["status"] != 200:
            raise RuntimeError(f"the uploaded prompt was refused: {made[1]['body'][:200]!r}")
        steps = [
            ("POST /api/tts (hit)", "POST", "/api/tts", post, form),
            ("GET /api/audio/{key}.wav", "GET", f"/api/audio/{key}.wav", [(b"host", b"bench")], b""),
            ("POST /api/tts (hit, prompt)", "POST", "/api/tts", with_prompt, upload),
        ]
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; fast path {not args.no_fast_path}")
        print(f"{'endpoint':28} {'app us':>8} {'bare us':>8} {'app/bare':>9}")
        for name, method, path, headers, body in steps:
            ours, floor = [], []
            for _ in range(args.rounds):
                ours.append(await per_request(app, method, path, headers, body, args.requests))
                floor.append(await per_request(bare, method, path, headers, body, args.requests))
            a, b = statistics.median(ours), statistics.median(floor)
            print(f"{name:28} {a:8.1f} {b:8.1f} {a / b:9.2f}")
        return 0
    finally:
        service.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
