"""What the web UI shows, as pure functions of the service's answers: the cache badge,
the dashboard's Markdown and the data frames of its plots and tables. Tested directly,
without a browser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from lib.ui.shared_status import status_markdown

__all__ = [
    "BADGE_COLOURS", "badge_html", "hit_rate_frame", "latency_frame", "segments_line", "stats_markdown", "top_frame",
]

BADGE_COLOURS = {"HIT": "#15803d", "MISS": "#b45309", "BYPASS": "#475569", "COMPOSED": "#1d4ed8"}
"""HIT green, MISS amber, BYPASS grey, COMPOSED blue (made from a template's cached pieces)."""


def badge_html(cache: str) -> str:
    colour = BADGE_COLOURS.get(cache, "#475569")
    return (
        f'<span class="cache-badge" id="cache-badge-value" data-cache="{cache}" '
        f'style="background:{colour};color:#fff;padding:4px 14px;border-radius:999px;font-weight:700">{cache}</span>'
    )


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def stats_markdown(snap: dict[str, Any]) -> str:
    used, limit = snap["bytes"], snap["size_limit"]
    lines = [
        f"**Entries 条目**: {snap['entries']}  ",
        f"**Size 容量**: {_human_bytes(used)} of {_human_bytes(limit)} ({100 * used / limit:.1f} %)  ",
        f"**Hit rate 命中率**: {100 * snap['hit_rate']:.1f} % since start, "
        f"{100 * snap['hit_rate_total']:.1f} % in total  ",
        f"**Since start 本次启动**: {snap['hits']} hits, {snap['misses']} misses, {snap['bypasses']} bypasses, "
        f"{snap['errors']} errors, {snap['engine_calls']} engine calls  ",
        f"**In total 累计**: {snap['hits_total']} hits, {snap['misses_total']} misses  ",
        f"**Engine time saved 节省引擎时间**: {snap.get('engine_seconds_saved_total', 0):.1f} s in total, "
        f"{snap.get('engine_seconds_saved_last_hour', 0):.1f} s in the last hour  ",
        segments_line(snap.get("since_start", {})),
        f"**Engine 引擎**: `{snap['tag']}`",
    ]
    if not snap.get("cache_available", True):
        lines.append(f"\n**Cache unavailable** (serving without it): {snap.get('cache_error')}")
    shared = status_markdown(snap.get("shared"))
    if shared:
        lines.append("\n" + shared)
    return "\n".join(lines)


def segments_line(since: dict[str, Any]) -> str:
    """Segments reused and synthesised, composed answers, streams and their mean time to
    first audio, since start."""
    streams = int(since.get("streams", 0))
    first = f", first audio after {since.get('first_audio_ms', 0) / streams:.0f} ms on average" if streams else ""
    return (
        f"**Segments 分句**: {since.get('segments_reused', 0)} reused, "
        f"{since.get('segments_synthesised', 0)} synthesised; **Composed 模板拼接**: {since.get('composed', 0)}; "
        f"**Streamed 流式**: {streams}{first}  "
    )


def latency_frame(samples: Sequence[tuple[float, str, float]]) -> pd.DataFrame:
    rows = [(pd.Timestamp(t, unit="s"), kind, seconds * 1e3) for t, kind, seconds in samples]
    return pd.DataFrame(rows, columns=["time", "result", "ms"])


def hit_rate_frame(samples: Sequence[tuple[float, str, float]], window: int = 20) -> pd.DataFrame:
    """Hit rate over the last ``window`` lookups, after each lookup."""
    lookups = [(t, kind == "hit") for t, kind, _ in samples if kind in ("hit", "miss")]
    rows = []
    for i, (t, _) in enumerate(lookups):
        recent = lookups[max(0, i + 1 - window) : i + 1]
        rows.append((pd.Timestamp(t, unit="s"), 100.0 * sum(hit for _, hit in recent) / len(recent)))
    return pd.DataFrame(rows, columns=["time", "hit_rate"])


def top_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [(r["count"], r["text"], r["voice"], r["key"]) for r in rows], columns=["count", "text", "voice", "key"]
    )
