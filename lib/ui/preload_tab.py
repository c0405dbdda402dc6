"""The Preload tab: run a phrase list (the shipped one, or an upload) through the cache.

Layout and wiring only, as in ``webui.py`` (which builds the other tabs); the work is
:meth:`lib.ui.cache_handlers.CacheHandlers.run_preload`."""

from __future__ import annotations

import logging

import gradio as gr
from gradio.events import Dependency

from lib.ui.base import token_box
from lib.ui.cache_handlers import CacheHandlers

__all__ = ["PRELOAD_LABELS", "preload_tab"]

_LOGGER = logging.getLogger(__name__)


#: Run preload, ready and while a preload runs.
PRELOAD_LABELS = {False: "开始预加载 Run preload", True: "预加载中… Preloading…"}


def preload_tab(h: CacheHandlers) -> Dependency:
    """The tab's components and its one event (``/preload``); returns the event, whose
    ``.success`` refreshes the Cache tab."""
    shipped = h.phrases_path.name
    gr.Markdown(
        f"把短语列表预先合成进缓存，已缓存的会跳过；不上传时使用自带的 `{shipped}`。 Run a hot-phrase list "
        f"through the cache; cached phrases are skipped. Without an upload the shipped list `{shipped}` is used."
    )
    upload = gr.File(
        label="短语列表（可选）Phrase list (optional)", file_types=[".json"], type="filepath", elem_id="preload-file"
    )
    with gr.Row():
        force = gr.Checkbox(False, label="强制重新生成已缓存的短语（管理员）Force: regenerate cached phrases (admin)")
        token = token_box(", to force", h.service.config.server.admin_token_env, "preload-token")
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
    done: Dependency = running
    return done
