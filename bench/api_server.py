"""The app's HTTP API in a subprocess on a free port, for the HTTP benchmarks."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def api_server(engine: str, *, clean_env: bool = False) -> Iterator[str]:
    """Serve ``python -m lib.api --engine ENGINE`` on a fresh cache folder (removed after)
    and yield its base URL once ``/healthz`` answers. ``clean_env``: without the caller's
    ``TTS_*`` variables. Raises RuntimeError if it does not start within 120 s."""
    cache = tempfile.mkdtemp(prefix="bench-api-")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not (clean_env and k.startswith("TTS_"))}
    env.update(TTS_VOICES_PREWARM="false", PYTHONPATH=str(ROOT))
    server = subprocess.Popen(
        [sys.executable, "-m", "lib.api", "--engine", engine, "--cache-dir", cache, "--port", str(port),
         "--log-level", "warning"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the API server did not start") from None
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(cache, ignore_errors=True)
