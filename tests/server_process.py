"""The real server (``python -m lib.api``) in a process of its own, for fault tests that
need a process to crash, be killed, or survive (a SIGBUS would kill it, where a thread
in the test process would take pytest down with it).

Configured through ``TTS_*`` environment variables (the tone engine by default); its
log goes to a file the test can read.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]

__all__ = ["ServerProcess"]


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The suite's callers are anonymous, all from the loopback address, many at once: the
#: anonymous limits (``tenants.anonymous_*``, lib.tenants) are off for the services tests
#: build, as environment variables (an override of None changes nothing). The tests of the
#: limits (tests/test_tenants.py) set them.
def end_process(process: subprocess.Popen[Any] | None, *, kill: bool = False) -> None:
    """Stop a helper server's ``process``: SIGKILL (a crash) with ``kill``, else SIGTERM and
    SIGKILL after 10 s; its output pipes closed."""
    if process is None:
        return
    if process.poll() is None:
        process.kill() if kill else process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


NO_ANONYMOUS_LIMITS = {
    "TTS_TENANTS_ANONYMOUS_SYNTH_CHARS_PER_HOUR": "null", "TTS_TENANTS_ANONYMOUS_REQUESTS_PER_MINUTE": "null",
    "TTS_TENANTS_ANONYMOUS_CONCURRENT_MISSES": "null",
}  # fmt: skip


class ServerProcess:
    """``python -m lib.api`` on a free loopback port."""

    def __init__(self, cache_dir: Path, log: Path, **env: Any) -> None:
        self.cache_dir = cache_dir
        self.log = log
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ, "TTS_ENGINE": "tone", "TTS_CACHE_DIR": str(cache_dir), "TTS_VOICES_PREWARM": "false",
            "PYTHONUNBUFFERED": "1", **NO_ANONYMOUS_LIMITS, **{k: str(v) for k, v in env.items()},
        }  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ServerProcess:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "lib.api", "--port", str(self.port), "--log-level", "warning"],
                cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited at start ({self.process.returncode}):\n{self.read_log()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code in (200, 503):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server did not answer within {timeout} s:\n{self.read_log()}")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or closed."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def read_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
