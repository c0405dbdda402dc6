"""The HTTP API: ``create_app(service)`` builds the FastAPI app (see ``lib.api.app``)."""

from __future__ import annotations

from lib.api.app import create_app

__all__ = ["create_app"]
