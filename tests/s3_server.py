"""A real S3-protocol server for tests and benchmarks: moto's standalone server
(``moto[server]``, pinned in requirements-dev.txt) in a process of its own, on a free
loopback port, killable and restartable on the same port.

What moto does not do that MinIO and AWS S3 do (docs/objects.md lists it too):
- it keeps everything in memory: a restart loses every bucket and object (like a Redis
  without persistence; :meth:`S3Server.restart` recreates the bucket);
- it checks ``If-None-Match: *`` and ``If-Match`` and then writes without a lock, so two
  simultaneous conditional PUTs could both succeed. AWS and MinIO make them atomic, and
  the cross-replica lease depends on it: this wrapper serialises PUT, POST and DELETE
  with one lock, which gives the tests the atomicity the real stores guarantee;
- it accepts any credentials and does not verify signatures (our signer is checked
  against botocore's in tests/test_objects_sigv4.py instead), nor presigned URLs' expiry;
- it stores lifecycle rules but never applies them (TTL expiry is the tier's sweep).

The wrapper also answers ``POST /__faults__`` with ``{"delay": seconds, "status": code}``
so a test can make the store slow or refusing (``{}`` heals it).

Run alone: ``python tests/s3_server.py --port 9000``; prints ``READY`` once it listens.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from server_process import end_process

__all__ = ["S3Server", "s3_server"]

ACCESS_KEY = "tts-test-access-key"
SECRET_KEY = "tts-test-SECRET-do-not-log-0123456789"  # the tests grep logs for it
BUCKET = "tts-cache"


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """One moto server process. ``endpoint`` stays valid across :meth:`restart`."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, prefix: str = "") -> str:
        """``cache.objects_url`` for the test bucket under ``prefix``."""
        return f"{self.endpoint}/{BUCKET}" + (f"/{prefix}" if prefix else "")

    @staticmethod
    def env() -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}

    def start(self, timeout: float = 30.0, *, bucket: bool = True) -> S3Server:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--port", str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        line = self.process.stdout.readline().decode()
        if not line.startswith("READY"):
            self.stop()
            raise RuntimeError(f"the S3 test server did not start: {line!r}")
        while time.monotonic() < deadline:  # listening: wait until it answers
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                time.sleep(0.05)
        if bucket:
            self.create_bucket(deadline)
        return self

    def create_bucket(self, deadline: float | None = None) -> None:
        """Make the bucket; tried again until ``deadline`` (monotonic): a server just
        started on a loaded machine can miss the client's short time-out once."""
        import httpx

        from lib.config.objects import parse_objects_url
        from lib.objects.client import ObjectClient, S3Error
        from lib.objects.sigv4 import Credentials

        deadline = deadline if deadline is not None else time.monotonic() + 30
        retried = False
        while True:
            client = ObjectClient(parse_objects_url(self.url()), Credentials(ACCESS_KEY, SECRET_KEY))
            try:
                client.create_bucket()
                return
            except S3Error as exc:
                if exc.status == 409 and retried:  # the timed-out try made it after all
                    return
                raise
            except httpx.TimeoutException:
                if time.monotonic() > deadline:
                    raise
                retried = True
            finally:
                client.close()
            time.sleep(0.2)

    def faults(self, *, delay: float = 0.0, status: int = 0) -> None:
        """Make every S3 request wait ``delay`` seconds and/or answer ``status``."""
        import httpx

        body = {"delay": delay, "status": status}
        httpx.post(f"{self.endpoint}/__faults__", json=body, timeout=5).raise_for_status()

    def stop(self, kill: bool = False) -> None:
        process, self.process = self.process, None
        end_process(process, kill=kill)

    def restart(self) -> S3Server:
        self.stop()
        return self.start()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    """A running server with the test bucket, for one test module."""
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


# -- the server process ---------------------------------------------------------------------

Start = Callable[..., Any]


class _Wrapper:
    """moto's WSGI app with writes serialised and faults on demand."""

    def __init__(self, app: Callable[[dict[str, Any], Start], Iterable[bytes]]) -> None:
        self.app = app
        self.writes = threading.Lock()
        self.delay = 0.0
        self.status = 0

    def __call__(self, environ: dict[str, Any], start: Start) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/__faults__":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            faults = json.loads(environ["wsgi.input"].read(length) or b"{}")
            self.delay, self.status = float(faults.get("delay", 0)), int(faults.get("status", 0))
            start("200 OK", [("Content-Type", "application/json")])
            return [b"{}"]
        if self.delay:
            time.sleep(self.delay)
        if self.status:
            body = b"<Error><Code>ServiceUnavailable</Code><Message>injected by the test</Message></Error>"
            start(f"{self.status} Injected", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]
        if environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE"):
            with self.writes:  # moto checks conditions and writes without a lock: make it atomic
                return list(self.app(environ, start))
        return self.app(environ, start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="moto S3 server for the tests")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    app = _Wrapper(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", args.port, app, threaded=True, request_handler=MotoRequestHandler)
    print("READY", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
