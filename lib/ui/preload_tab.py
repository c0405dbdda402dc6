"""The Preload tab: run a phrase list (the shipped one, or an upload) through the cache;
and the start-up preload's progress (a banner over every tab, and a line in this tab).

Layout and wiring only, as in ``webui.py`` (which builds the other tabs); the work is
:meth:`lib.ui.cache_handlers.CacheHandlers.run_preload` and
:class:`lib.batch.background.BackgroundPreload`."""

from __future__ import annotations

import html
import logging

import gradio as gr
from gradio.events import Dependency

from lib.batch.background import BackgroundPreload, PreloadStatus
from lib.ui.cache_handlers import BATCH_HEADERS, CacheHandlers, failure_lines

__all__ = ["PRELOAD_LABELS", "background_progress", "batch_jobs", "preload_banner", "preload_line", "preload_tab"]

_LOGGER = logging.getLogger(__name__)


#: Run preload, ready and while a preload runs.
PRELOAD_LABELS = {False: "开始预加载 Run preload", True: "预加载中… Preloading…"}


def preload_tab(h: CacheHandlers, token: gr.Textbox) -> tuple[Dependency, gr.Markdown]:
    """The tab's components and its one event (``/preload``); returns the event, whose
    ``.success`` refreshes the Cache tab, and the start-up preload's line
    (:func:`background_progress` fills it). ``token``: the page's admin sign-in (to force)."""
    shipped = h.phrases_path.name
    startup = gr.Markdown(elem_id="preload-startup")
    gr.Markdown(
        f"把短语列表预先合成进缓存，已缓存的会跳过；不上传时使用自带的 `{shipped}`。 Run a hot-phrase list "
        f"through the cache; cached phrases are skipped. Without an upload the shipped list `{shipped}` is used."
    )
    upload = gr.File(
        label="短语列表（可选）Phrase list (optional)", file_types=[".json"], type="filepath", elem_id="preload-file"
    )
    with gr.Row():
        force = gr.Checkbox(False, label="强制重新生成已缓存的短语（管理员）Force: regenerate cached phrases (admin)")
    start = gr.Button(PRELOAD_LABELS[False], variant="primary", elem_id="run-preload")
    # The progress bar is drawn over this box: it has a height of its own even while empty
    # (an empty Markdown is 0 px high, and the bar was clipped away inside it).
    result = gr.Markdown(elem_id="preload-result", min_height=96)
    error = gr.HTML(elem_id="preload-error", js_on_load=None)
    # First the button busy (a second click while a preload runs would be dropped unseen:
    # Gradio runs one event of a button at a time), then the preload, then ready again.
    running = start.click(
        lambda: ("", "", gr.update(value=PRELOAD_LABELS[True], interactive=False)), outputs=[result, error, start],
        queue=False, show_progress="hidden", api_visibility="private",
    ).then(
        h.run_preload, inputs=[upload, force, token], outputs=result, api_name="preload", show_progress_on=[result]
    )  # fmt: skip
    running.failure(h.failure_view("preload"), outputs=error, api_visibility="private")
    for ended in (running.success, running.failure):
        ended(
            lambda: gr.update(value=PRELOAD_LABELS[False], interactive=True), outputs=start, queue=False,
            show_progress="hidden", api_visibility="private",
        )  # fmt: skip
    batch_jobs(h, upload, token)
    done: Dependency = running
    return done, startup


#: How often an open Preload tab refreshes the batch jobs table.
BATCH_SECONDS = 3.0


def batch_jobs(h: CacheHandlers, upload: gr.File, token: gr.Textbox) -> None:
    """The batch jobs (``POST /api/batch``; every replica makes them): a table refreshed
    every :data:`BATCH_SECONDS`, and the admin's button that submits the list above as a job."""
    gr.Markdown(
        "#### 批量任务 Batch jobs\n"
        "由所有副本在后台合成；管理员可把上面的列表提交为批量任务。 Made in the background by every replica "
        "(`POST /api/batch`); the admin submits the list above as a job."
    )
    submit = gr.Button("提交为批量任务（管理员）Submit as a batch job (admin)", elem_id="submit-batch")
    submitted = gr.Markdown(elem_id="batch-result")
    error = gr.HTML(elem_id="batch-error", js_on_load=None)
    table = gr.Dataframe(
        value=h.batch_jobs, headers=BATCH_HEADERS, interactive=False, elem_id="batch-jobs", label="批量任务 Batch jobs"
    )
    sent = submit.click(
        h.submit_batch, inputs=[upload, token], outputs=[submitted, table], api_name="batch", show_progress="hidden"
    )
    sent.failure(h.failure_view("batch"), outputs=error, api_visibility="private")
    sent.success(lambda: "", outputs=error, queue=False, show_progress="hidden", api_visibility="private")
    timer = gr.Timer(BATCH_SECONDS)
    timer.tick(h.batch_jobs, outputs=table, api_visibility="private", show_progress="hidden", queue=False)


#: How often an open page asks for the start-up preload's progress while it runs.
PROGRESS_SECONDS = 2.0


def preload_line(status: PreloadStatus) -> str:
    """The start-up preload in operators' words (both languages), or "" when none ran."""
    state, name = status["state"], status["list"]
    done, total = status["done"], status["total"]
    counts = (
        f"新生成 {status['generated']} 条 made, 已缓存 {status['cached']} 条 cached, 失败 {status['failed']} 条 failed"
    )
    if state == "loading":
        return f"启动预加载：正在读取 {name}… Start-up preload: reading {name}…"
    if state == "running":
        share = f" ({100 * done // total} %)" if total else ""
        return (
            f"启动预加载中 Start-up preload of {name}: {done}/{total}{share} — {counts}. "
            "现在即可使用，尚未预加载的短语会在请求时合成。 You can work now: a phrase not yet preloaded is "
            "made when you ask for it."
        )
    if state == "done":
        mark = "⚠" if status["failed"] else "✔"
        took = f"{status['seconds']:.0f} s"
        done_line = f"{mark} 启动预加载完成 Start-up preload of {name} done: {total} 条 phrases — {counts} ({took})."
        if status["failed"]:
            done_line += " 失败的短语会在请求时再合成 Failed phrases are made again when asked for."
        return done_line
    if state == "failed":
        return (
            f"⚠ 启动预加载未完成 The start-up preload of {name} did not run: {status['error']}. "
            "短语会在请求时合成 Phrases are made when asked for."
        )
    if state == "stopped":
        return f"启动预加载已停止 The start-up preload of {name} stopped at {done}/{total}."
    return ""


def preload_banner(status: PreloadStatus) -> str:
    """The banner over every tab: while the start-up preload runs, and after it when some
    phrases failed or the list could not be read; "" otherwise (hidden)."""
    state = status["state"]
    show = state in ("loading", "running", "failed") or (state == "done" and status["failed"] > 0)
    if not show:
        return ""
    kind = "warn" if state == "failed" or status["failed"] else "info"
    return f'<div class="preload-banner {kind}" role="status">{html.escape(preload_line(status))}</div>'


def background_progress(preload: BackgroundPreload, banner: gr.HTML, line: gr.Markdown, demo: gr.Blocks) -> None:
    """Keep ``banner`` and the Preload tab's ``line`` up to date: on page load, then every
    :data:`PROGRESS_SECONDS` while the start-up preload runs (the timer stops after it)."""
    timer = gr.Timer(PROGRESS_SECONDS, active=preload.running)

    def show() -> tuple[str, str, gr.Timer]:
        status = preload.status()
        running = status["state"] in ("loading", "running")
        line = preload_line(status)
        report = preload.report
        if report is not None and report.failed:  # which phrases, and why, in both languages
            line += "\n\n" + "\n".join(failure_lines(report))
        return preload_banner(status), line, gr.Timer(active=running)

    for trigger in (demo.load, timer.tick):
        trigger(show, outputs=[banner, line, timer], api_visibility="private", show_progress="hidden", queue=False)
