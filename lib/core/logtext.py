"""User text in logs, messages and public statistics: cut short, so that a log line
stays one line and never carries a whole announcement."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["cut_fields", "cut_text"]


def cut_text(text: str, n: int = 32) -> str:
    """User text in logs and public statistics is cut to ``n`` characters."""
    return text if len(text) <= n else text[: n - 1] + "…"


def cut_fields(fields: Mapping[str, object]) -> dict[str, object]:
    """``fields`` for a log line: every text value cut to 32 characters."""
    return {k: cut_text(v) if isinstance(v, str) else v for k, v in fields.items()}
