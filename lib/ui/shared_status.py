"""The shared tiers' state as dashboard text (Markdown), from ``SharedTier.status()`` and
``ObjectTier.status()`` (``TTSService.snapshot()["shared"]`` and ``["objects"]``), so the
web UI needs one call to show them."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

__all__ = ["objects_markdown", "status_markdown"]


def status_markdown(status: Mapping[str, Any] | None) -> str:
    """A few Markdown lines; an empty string when no shared tier is configured."""
    if not status:
        return ""
    if status.get("up"):
        state = "up 正常"
    else:
        since = status.get("down_since")
        ago = f" for {time.time() - since:.0f} s" if isinstance(since, (int, float)) else ""
        state = f"**down 不可用**{ago}: serving from local tiers ({status.get('last_error') or 'unreachable'})"
    lines = [
        f"**Shared tier 共享缓存** `{status.get('url', '')}`: {state}  ",
        f"This replica `{status.get('replica', '')}`: {status.get('hits', 0)} Redis hits, "
        f"{status.get('puts', 0)} writes, {status.get('corrupt', 0)} corrupt dropped, "
        f"{status.get('errors', 0)} faults  ",
    ]
    cluster = status.get("cluster")
    if isinstance(cluster, Mapping):
        replicas = len(status.get("replicas") or [])
        stale = " (last known)" if status.get("stale") else ""
        lines.append(
            f"**All replicas 全部副本** ({replicas}){stale}: {cluster.get('hits', 0)} hits, "
            f"{cluster.get('misses', 0)} misses, {100 * float(cluster.get('hit_rate', 0.0)):.1f} % hit rate, "
            f"{cluster.get('engine_calls', 0)} engine calls  "
        )
    policy = status.get("redis_maxmemory_policy")
    if policy:
        limit = status.get("redis_maxmemory") or 0
        used = status.get("redis_memory_bytes") or 0
        cap = f"{limit / 2**20:.0f} MiB" if limit else "no maxmemory"
        lines.append(f"Redis memory: {used / 2**20:.1f} MiB used, {cap}, policy `{policy}`")
    return "\n".join(lines)


def objects_markdown(status: Mapping[str, Any] | None) -> str:
    """One or two Markdown lines about the object-store tier; '' when none is configured."""
    if not status:
        return ""
    if status.get("up"):
        state = "up 正常"
    else:
        since = status.get("down_since")
        ago = f" for {time.time() - since:.0f} s" if isinstance(since, (int, float)) else ""
        state = f"**down 不可用**{ago}: serving from the other tiers ({status.get('last_error') or 'unreachable'})"
    redirect = " · redirects /api/audio" if status.get("redirect") else ""
    return (
        f"**Object store 对象存储** `{status.get('url', '')}`: {state}{redirect}  \n"
        f"This replica: {status.get('hits', 0)} hits, {status.get('misses', 0)} misses, "
        f"{status.get('puts', 0)} writes, {status.get('expired', 0)} expired, {status.get('swept', 0)} swept, "
        f"{status.get('corrupt', 0)} corrupt dropped, {status.get('errors', 0)} faults  "
    )
