"""A real uvicorn server on a free loopback port, for the HTTP API tests."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from lib.api.serving import uvicorn_config
from lib.config import ServerConfig


class LiveServer:
    """Runs an ASGI app in a background thread; ``url`` is its base URL."""

    def __init__(self, app: Any, server: ServerConfig | None = None) -> None:
        """``server``: serve with the app's own uvicorn settings (lib.api.serving:
        header and body deadlines, connection limit) instead of uvicorn's defaults."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if server is not None:
            config = uvicorn_config(app, server, log_level="warning", access_log=False, lifespan="off")
        else:
            config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def raw(self, request: bytes, timeout: float = 10.0) -> bytes:
        """Send raw bytes and read the whole answer (the connection is closed by us)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as conn:
            conn.sendall(request)
            conn.shutdown(socket.SHUT_WR)
            chunks = []
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks)
