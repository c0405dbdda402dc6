"""Benchmark of a stop with an engine call in flight: seconds from SIGTERM to the process's
exit, and its exit status, for ``python -m lib.api`` and ``webui.py`` on the configured
engine (the builtin engine: the Kokoro base where it is installed).

Each run starts a server on a fresh cache, makes one short request (the model loaded),
sends a long text that misses, waits until its engine call is under way
(``/healthz``: ``calls_in_flight``), sends SIGTERM and times the exit. An exit status of
-6 is an abort (onnxruntime's threads torn down under a run), not a clean stop.

Run: .venv/bin/python bench/bench_sigterm.py [--runs N] [--entry lib.api|webui|both]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
TEXT = "今天的天气很好，我们一起去公园散步吧。" * 6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def one_stop(entry: str, run: int) -> tuple[float, int]:
    folder = tempfile.mkdtemp(prefix="bench-sigterm-")
    port = free_port()
    env = {
        **os.environ, "TTS_ENGINE": "builtin", "TTS_CACHE_DIR": f"{folder}/cache", "TTS_VOICES_PREWARM": "false",
        "TTS_WATCHDOG_PROBE_INTERVAL": "0", "TTS_TEMPLATES_FILE": "null", "GRADIO_ANALYTICS_ENABLED": "False",
    }  # fmt: skip
    program = ["-m", "lib.api"] if entry == "lib.api" else ["webui.py"]
    with open(f"{folder}/server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, *program, "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=log
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    httpx.get(url + "/healthz", timeout=5)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{entry}: the server did not start; see {folder}/server.log") from None
                    time.sleep(0.2)
            httpx.post(url + "/api/tts", data={"text": "你好。", "voice": "zh-female"}, timeout=180)
            miss = {"text": f"{TEXT}{run}", "voice": "zh-female"}
            threading.Thread(target=lambda: _quietly_post(url + "/api/tts", miss), daemon=True).start()
            while httpx.get(url + "/healthz", timeout=5).json()["engine_state"]["calls_in_flight"] < 1:
                time.sleep(0.05)
            time.sleep(0.3)  # well inside the call
            started = time.monotonic()
            server.send_signal(signal.SIGTERM)
            code = server.wait(120)
            return time.monotonic() - started, code
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()


def _quietly_post(url: str, data: dict[str, str]) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(url, data=data, timeout=180)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--entry", choices=["lib.api", "webui", "both"], default="both")
    args = parser.parse_args()
    for entry in ["lib.api", "webui"] if args.entry == "both" else [args.entry]:
        for run in range(args.runs):
            seconds, code = one_stop(entry, run)
            print(f"{entry}: run {run + 1}: exited {seconds:.2f} s after SIGTERM, status {code}", flush=True)


if __name__ == "__main__":
    main()
