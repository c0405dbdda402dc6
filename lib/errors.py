"""One base error type for the whole service, with a few subclasses.

Each boundary translates these exactly once: the HTTP API maps ``http_status`` to a
status code and ``str(error)`` to ``{"error": ...}``; the web UI raises ``gr.Error``;
the command-line tools print the message and exit non-zero. Messages say what is wrong
*and* how to fix it, because they are shown to operators as they are.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from lib.core.logtext import cut_text

__all__ = [
    "AbandonedError",
    "ConfigError",
    "ConflictError",
    "ConfusableNameError",
    "EngineError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "ForbiddenError",
    "NotAudioError",
    "NotFoundError",
    "OutOfRangeError",
    "PayloadTooLargeError",
    "PromptAudioError",
    "RateLimitedError",
    "StoreFullError",
    "StoreUnavailableError",
    "TTSError",
    "UnauthorizedError",
    "ValidationError",
    "log_safe",
]


class TTSError(Exception):
    """Base of every error this project raises on purpose."""

    http_status = 500


class ValidationError(TTSError):
    """A request field is missing or out of range (HTTP 400)."""

    http_status = 400


class PayloadTooLargeError(ValidationError):
    """An upload exceeds the configured limit (HTTP 413)."""

    http_status = 413


class NotAudioError(ValidationError):
    """Prompt audio could not be decoded as audio at all (HTTP 415)."""

    http_status = 415


class PromptAudioError(ValidationError):
    """Prompt audio decodes but cannot be used as a prompt: too short, too long,
    silent, or not speech (HTTP 422)."""

    http_status = 422


class ConfusableNameError(ValidationError):
    """A name is well formed but can pass for other names: it mixes alphabets whose
    letters look alike (HTTP 422)."""

    http_status = 422


class OutOfRangeError(ValidationError):
    """A count is well formed but outside what the operation allows, e.g. the number
    of takes (HTTP 422)."""

    http_status = 422


class NotFoundError(TTSError):
    """A named voice, cache key or other resource does not exist (HTTP 404)."""

    http_status = 404


class ConflictError(TTSError):
    """The request collides with what exists, e.g. saving over a voice's name (HTTP 409)."""

    http_status = 409


class UnauthorizedError(TTSError):
    """The action needs the admin token and none was given (HTTP 401)."""

    http_status = 401


class ForbiddenError(TTSError):
    """The caller may not do this: wrong token, or a remote client while no token is
    configured (HTTP 403)."""

    http_status = 403


class RateLimitedError(TTSError):
    """A caller went over one of its limits (``tenants:``, ``POST /api/keys``) (HTTP 429).
    ``headers``: ``Retry-After`` and OpenAI's ``x-ratelimit-*`` headers; ``limit``: the
    limit's name (``synth_chars_per_hour``, ``requests_per_minute``, ``concurrent_misses``)."""

    http_status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, limit: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.limit = limit
        self.headers = headers


class StoreUnavailableError(TTSError):
    """A store that must write (the voice library) cannot, e.g. a full or read-only
    disk (HTTP 503); nothing was changed."""

    http_status = 503


class StoreFullError(StoreUnavailableError):
    """A store that must write has reached its cap (the voice library: a quarter of
    ``cache.size_limit``) (HTTP 507); nothing was changed."""

    http_status = 507


class EngineError(TTSError):
    """The engine failed or produced unusable audio; nothing was cached (HTTP 500)."""

    http_status = 500


class EngineUnavailableError(EngineError):
    """The engine cannot serve at all: missing model, missing packages (HTTP 503)."""

    http_status = 503


class EngineTimeoutError(EngineError):
    """An engine call passed its deadline (``watchdog:`` in config.yaml) and was given
    up; nothing was cached (HTTP 504)."""

    http_status = 504


class AbandonedError(TTSError):
    """Nobody waits for this work any more (its client disconnected, and no other
    request shares it), so it was not started; nothing was cached (HTTP 499, nginx's
    "client closed request": only a log or a test ever sees it)."""

    http_status = 499

    def __init__(self, reason: str) -> None:
        super().__init__(f"the client went away ({reason}); the engine was not started for nobody")
        self.reason = reason


def log_safe(exc: BaseException) -> str:
    """``exc`` for a log line: its type, its message cut to 32 characters (a message
    may quote user text), and where it was raised (file, line and function of each
    frame; no values, so no user text)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames[-8:]))
    return f"{type(exc).__name__}: {cut_text(str(exc))} at {where or '?'}"


class ConfigError(TTSError):
    """The configuration is invalid; the message names the key."""

    http_status = 500
