"""A real ``redis-server`` for tests and benchmarks, on a free loopback port.

Started with a private temporary directory and no persistence (``--save ''
--appendonly no``), stopped (or killed) on request, restartable on the same port.
Without ``redis-server`` on PATH the tests that need it are skipped with a reason,
except under CI (env ``CI`` set), where they fail: CI installs it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
import redis
from server_process import end_process

__all__ = ["RedisServer", "free_port", "redis_server", "require_redis_server"]


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_redis_server() -> str:
    """The path of ``redis-server``; skips the test (fails under CI) without it."""
    path = shutil.which("redis-server")
    if path is None:
        message = "redis-server is not installed (apt-get install -y redis-server); the shared tier needs a real Redis"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


class RedisServer:
    """One ``redis-server`` process. ``url`` stays valid across :meth:`restart`."""

    def __init__(
        self, binary: str = "redis-server", port: int | None = None, directory: Path | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        """``extra``: more redis-server arguments, e.g. ``("--enable-debug-command", "yes")``."""
        self.binary = binary
        self.extra = extra
        self.port = port or free_port()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="redis-test-")
            directory = Path(self._tmp.name)
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self, timeout: float = 10.0) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
            "--save", "", "--appendonly", "no", "--protected-mode", "yes", "--loglevel", "warning", *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        with closing(redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)) as probe:
            while True:
                if self.process.poll() is not None:
                    err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                    raise RuntimeError(f"redis-server exited at start: {err.strip()}")
                try:
                    if probe.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer on port {self.port}")
                time.sleep(0.02)

    def stop(self, kill: bool = False) -> None:
        """Stop the server; ``kill`` sends SIGKILL (a crash), otherwise SIGTERM."""
        process, self.process = self.process, None
        end_process(process, kill=kill)

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """A running server for one test module (import this fixture into the module)."""
    binary = require_redis_server()
    server = RedisServer(binary)
    server.start()
    try:
        yield server
    finally:
        server.close()
