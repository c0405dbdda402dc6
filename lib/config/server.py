"""The web server's section of the configuration (``server:``), with its checks beside
its fields. Re-exported by :mod:`lib.config`, which reads it with the other sections.

The timeouts and limits are what a slow or idle client may hold (lib.api.serving); a
reverse proxy in front should be stricter (README, "Serving in production").
"""

from __future__ import annotations

from dataclasses import dataclass

from lib.config.load import require

__all__ = ["ServerConfig"]


@dataclass(frozen=True)
class ServerConfig:
    """The web server (``server:``)."""

    host: str = "127.0.0.1"
    """Interface to bind; 0.0.0.0 exposes the app to the network."""
    port: int = 7860
    """TCP port of the UI and the HTTP API."""
    admin_token_env: str = "TTS_ADMIN_TOKEN"
    """Name of the environment variable holding the admin bearer token. With no token,
    admin endpoints are served to loopback clients only."""
    header_timeout: float = 10.0
    """Seconds a client may take to send a request's line and headers (a connection
    that sends nothing is closed after this long too); then it is closed (408)."""
    body_timeout: float = 60.0
    """Seconds a client may take to send a request's whole body; then 408."""
    keepalive_timeout: float = 5.0
    """Seconds an idle keep-alive connection is kept open between requests."""
    max_connections: int = 256
    """Connections served at once; beyond it a request is answered 503 at once."""
    max_header_bytes: int = 16 * 1024
    """Largest request line plus headers accepted (400 beyond it)."""

    def __post_init__(self) -> None:
        require(
            (1 <= self.port <= 65535, f"server.port: must be 1-65535, got {self.port}"),
            *(
                (
                    0 < getattr(self, key) <= 3600,
                    f"server.{key}: must be more than 0 and at most 3600 seconds, got {getattr(self, key)}",
                )
                for key in ("header_timeout", "body_timeout", "keepalive_timeout")
            ),
            (self.max_connections >= 1, f"server.max_connections: must be at least 1, got {self.max_connections}"),
            (
                4096 <= self.max_header_bytes <= 1024**2,
                f"server.max_header_bytes: must be 4KiB-1MiB, got {self.max_header_bytes}",
            ),
        )
