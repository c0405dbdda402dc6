"""The Preload tab: run a phrase list (the shipped one, or an upload) through the cache.

Layout and wiring only, as in ``webui.py`` (which builds the other tabs); the work is
:meth:`lib.ui.cache_handlers.CacheHandlers.run_preload`."""

from __future__ import annotations

import logging

import gradio as gr

from lib.ui.base import token_box
from lib.ui.cache_handlers import CacheHandlers

__all__ = ["preload_tab"]

_LOGGER = logging.getLogger(__name__)


def preload_tab(h: CacheHandlers) -> None:
    """The tab's components and its one event (``/preload``)."""
    shipped = h.phrases_path.name
    gr.Markdown(
        f"把短语列表预先合成进缓存，已缓存的会跳过；不上传时使用自带的 `{shipped}`。 Run a hot-phrase list "
        f"through the cache; cached phrases are skipped. Without an upload the shipped list `{shipped}` is used."
    )
    upload = gr.File(label="短语列表（可选）Phrase list (optional)", file_types=[".json"], type="filepath")
    with gr.Row():
        force = gr.Checkbox(False, label="强制重新生成已缓存的短语（管理员）Force: regenerate cached phrases (admin)")
        token = token_box(", to force", h.service.config.server.admin_token_env, "preload-token")
    start = gr.Button("开始预加载 Run preload", variant="primary", elem_id="run-preload")
    result = gr.Markdown(elem_id="preload-result")
    error = gr.HTML(elem_id="preload-error", js_on_load=None)
    running = start.click(
        lambda: ("", ""), outputs=[result, error], queue=False, show_progress="hidden", api_visibility="private"
    ).then(h.run_preload, inputs=[upload, force, token], outputs=result, api_name="preload")
    running.failure(h.failure_view("preload"), outputs=error, api_visibility="private")
