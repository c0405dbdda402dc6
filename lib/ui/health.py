"""The engine and the stores as they are, over every tab: the page header names the
engine and the base voice that speak now, and a banner says, in operators' words, why
the app is degraded while ``/healthz`` says so.

Both read :meth:`lib.ops.dashboard.Dashboard.health` (the answer of ``/healthz``) when
a page loads and every :data:`HEALTH_SECONDS` after: the built-in engine may fall back
from Kokoro to espeak-ng after the page was built, and a store or the engine may fail
or come back at any time.
"""

from __future__ import annotations

import html
import logging

import gradio as gr

from lib.core.reports import HealthReport
from lib.pipeline.service import TTSService
from lib.ui.views import engine_title

__all__ = ["HEALTH_SECONDS", "header_markdown", "health_banner", "live_health", "reason_words"]

_LOGGER = logging.getLogger(__name__)

#: How often an open page reads the health (a dict built in memory: no engine call).
HEALTH_SECONDS = 15.0

TITLE = "# 语音克隆合成 Voice cloning TTS"

#: (what a reason starts with, what it means for the operator), first match wins.
_WORDS = (
    ("engine stuck", "语音引擎暂时无响应：已缓存的内容照常播放，新内容可能失败 "
     "The voice engine is not answering: cached announcements play as usual; new ones may fail"),
    ("engine failing", "语音引擎出错：已缓存的内容照常播放，新内容可能失败 "
     "The voice engine is failing: cached announcements play as usual; new ones may fail"),
    ("engine degraded", "语音引擎状态不佳：新内容可能变慢或失败 "
     "The voice engine is degraded: new announcements may be slow or fail"),
    ("disk full", "缓存磁盘已满：为新结果腾出空间时会删除旧结果 "
     "The cache disk is full: old results are removed to make room for new ones"),
    ("shared tier", "共享缓存（Redis）连接不上：暂用本机缓存，其他服务器的结果暂不可用 "
     "The shared cache (Redis) cannot be reached: this machine's cache is used meanwhile"),
    ("object store", "对象存储连接不上：暂用其他缓存 The object store cannot be reached: the other caches are used"),
    ("results store", "结果文件夹不可用：播放和下载可能失败 "
     "The results folder cannot be used: playing and downloading may fail"),
    ("audio store", "缓存存储不可用：照常合成，但结果暂不保存 "
     "The cache store cannot be used: announcements are made as usual but not kept for now"),
    ("", "部分存储不可用：照常合成 A store cannot be used: announcements are made as usual"),
)  # fmt: skip


def reason_words(reason: str) -> str:
    """One ``/healthz`` reason in operators' words (both languages)."""
    return next(words for start, words in _WORDS if reason.startswith(start))


def header_markdown(health: HealthReport) -> str:
    """The page header: the title and the engine with the base voice that speaks now."""
    engine = engine_title(health["engine"], health.get("base", ""))
    return f"{TITLE}\n引擎 Engine：{engine}"


def health_banner(health: HealthReport) -> str:
    """A banner while the app is degraded: each problem in operators' words, the
    technical reason under it; "" (hidden) while all is well."""
    if health["status"] == "ok" or not health["reasons"]:
        return ""
    items = "".join(
        f"<li>{html.escape(reason_words(reason))}<br><small>{html.escape(reason)}</small></li>"
        for reason in health["reasons"]
    )
    return f'<div class="health-banner" role="alert"><strong>⚠ 服务降级 Degraded service</strong><ul>{items}</ul></div>'


def live_health(service: TTSService, header: gr.Markdown, banner: gr.HTML, demo: gr.Blocks) -> None:
    """Keep ``header`` and ``banner`` true to the service's health: on page load, and
    whenever ``/healthz`` answers differently. The page script reads ``/healthz`` every
    :data:`HEALTH_SECONDS` and presses a hidden button only on a change: a Gradio timer
    event every 15 s ended (and so wiped) the validation message under a field the
    operator was reading."""

    def show() -> tuple[str, str]:
        try:
            health = service.dashboard.health()
        except Exception:  # a health read must never break the page
            _LOGGER.exception("reading the health for the page failed")
            return gr.skip(), gr.skip()
        return header_markdown(health), health_banner(health)

    changed = gr.Button("health", elem_id="health-refresh", elem_classes=["health-refresh"])
    for trigger in (demo.load, changed.click):
        trigger(show, outputs=[header, banner], api_visibility="private", show_progress="hidden", queue=False)
    demo.load(None, js=_POLL.replace("SECONDS_MS", str(int(HEALTH_SECONDS * 1000))))


#: The page script that reads ``/healthz`` and asks for a new header and banner on a change.
_POLL = """
() => {
  let last = null;
  const read = () => fetch("/healthz", { cache: "no-store" })
    .then((r) => r.json())
    .then((h) => {
      const now = JSON.stringify([h.status, h.reasons, h.engine, h.base]);
      if (last !== null && now !== last) document.querySelector("#health-refresh")?.click();
      last = now;
    })
    .catch(() => {});
  read();
  setInterval(read, SECONDS_MS);
}
"""
