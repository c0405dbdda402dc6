#!/usr/bin/env python3
"""The operator web UI: Gradio components wired to the handlers in :mod:`lib.ui`.

``build_demo(service)`` builds the Blocks; ``create_app(service)`` serves it at ``/``
next to the HTTP API (``lib.api``) on one port; ``main()`` parses the command line and
runs uvicorn. Importing this module has no side effects. Nothing here writes files or
decides who may do what: the handlers call the service, which does.

Configuration precedence, lowest first: built-in defaults < ``config.yaml`` (or
``--config``) < ``TTS_*`` environment variables < command-line flags.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import gradio as gr
from fastapi import FastAPI

from lib.api import create_app as create_api
from lib.audio import FORMATS
from lib.cli import add_config_flags, config_from_args
from lib.errors import TTSError
from lib.service import TTSService
from lib.ui.handlers import LIVE_NOTICE, MODE_CHOICES, Handlers, build_request, live_playback_available
from lib.validate import MAX_SEED, MAX_SPEED, MIN_SPEED

__all__ = ["build_demo", "build_request", "create_app", "main"]

_LOGGER = logging.getLogger("webui")

HERE = Path(__file__).resolve().parent
DEFAULT_PHRASES = HERE / "hot_phrases.json"

_CSS = ".cache-badge{display:inline-block;padding:4px 14px;border-radius:999px;font-weight:700;color:#fff}"


def build_demo(service: TTSService, *, phrases_path: Path = DEFAULT_PHRASES) -> gr.Blocks:
    """The Blocks app for ``service``; every event calls one method of :class:`Handlers`."""
    h = Handlers(service, phrases_path)
    live_ok = live_playback_available()
    token_env = service.config.server.admin_token_env

    demo = gr.Blocks(title="Voice cloning TTS 语音克隆", analytics_enabled=False)
    with demo:
        gr.Markdown(f"# Voice cloning TTS 语音克隆合成\nEngine 引擎: `{service.tag}`")
        with gr.Tab("合成 Synthesise"):
            with gr.Row():
                with gr.Column():
                    mode = gr.Radio(MODE_CHOICES, value="zero_shot", label="Mode 模式")
                    prompt_audio = gr.Audio(
                        sources=["upload", "microphone"], type="filepath", label="Prompt audio 参考音频",
                        elem_id="prompt-audio",
                    )  # fmt: skip
                    voice = gr.Dropdown(
                        h.voice_names(), value=None, label="Preset or saved voice 音色", allow_custom_value=True
                    )
                    prompt_text = gr.Textbox(
                        label="Prompt transcript 参考音频文本 (zero-shot)", lines=1, elem_id="prompt-text"
                    )
                    text = gr.Textbox(label="Text to speak 合成文本", lines=3, elem_id="tts-text")
                    style = gr.Textbox(label="Style instruction 风格指令 (e.g. 'slow, calm' / '开心')", lines=1)
                    with gr.Row():
                        seed = gr.Number(value=0, precision=0, minimum=0, maximum=MAX_SEED, label="Seed 随机种子")
                        dice = gr.Button("🎲 Random 随机", scale=0, min_width=120)
                    speed = gr.Slider(MIN_SPEED, MAX_SPEED, value=1.0, step=0.05, label="Speed 语速")
                    with gr.Row():
                        fmt = gr.Dropdown(list(FORMATS), value="wav", label="Format 格式")
                        use_cache = gr.Checkbox(value=True, label="Use cache 使用缓存")
                    generate = gr.Button("合成 Synthesise", variant="primary", elem_id="generate")
                with gr.Column():
                    live = gr.Audio(
                        streaming=True, autoplay=True, label="Live 实时播放", interactive=False, elem_id="live-audio"
                    ) if live_ok else gr.Markdown(LIVE_NOTICE, elem_id="live-notice")  # fmt: skip
                    output = gr.Audio(type="filepath", label="Result 结果", interactive=False, elem_id="result-audio")
                    badge = gr.HTML(elem_id="cache-badge")
                    details = gr.Markdown(elem_id="result-details")
            dice.click(h.roll_seed, outputs=seed, api_visibility="private")
            form = [mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache]
            # /synthesise answers the whole result (API clients); the button plays it live when it can.
            whole = gr.Button(visible=False) if live_ok else generate
            whole.click(h.synthesise, inputs=form, outputs=[output, badge, details], api_name="synthesise",
                        concurrency_limit=4)  # fmt: skip
            if live_ok:
                generate.click(h.synthesise_live, inputs=form, outputs=[live, output, badge, details],
                               api_name="synthesise_live", concurrency_limit=4)  # fmt: skip

        with gr.Tab("音色 Voices"):
            gr.Markdown("Save the prompt from the Synthesise tab (audio and transcript) as a named voice.")
            with gr.Row():
                voice_name = gr.Textbox(label="Voice name 音色名称", scale=3)
                replace = gr.Checkbox(False, label="Replace a saved voice (admin) 覆盖", scale=1)
                save = gr.Button("Save current prompt 保存音色", variant="primary", scale=1)
            voice_table = gr.Dataframe(h.voices_table, label="Voices 音色列表", interactive=False)
            with gr.Row():
                voice_pick = gr.Dropdown(h.voice_names(), value=None, label="Voice 音色", allow_custom_value=True)
                play = gr.Button("Play 试听")
                delete = gr.Button("Delete 删除", variant="stop")
            voice_token = gr.Textbox(
                label=f"Admin token, to replace or delete (only when {token_env} is set)", type="password"
            )
            voice_audio = gr.Audio(type="filepath", label="Sample 试听", interactive=False)
            voice_message = gr.Markdown()
            save.click(
                h.save_voice, inputs=[voice_name, prompt_audio, prompt_text, replace, voice_token],
                outputs=[voice, voice_pick, voice_table, voice_message], api_name="save_voice",
            )  # fmt: skip
            delete.click(
                h.delete_voice, inputs=[voice_pick, voice_token],
                outputs=[voice, voice_pick, voice_table, voice_message], api_name="delete_voice",
            )  # fmt: skip
            play.click(h.play_voice, inputs=voice_pick, outputs=voice_audio, api_visibility="private")

        with gr.Tab("缓存 Cache") as cache_tab:
            stats = gr.Markdown(elem_id="cache-stats")
            refresh = gr.Button("Refresh 刷新")
            with gr.Row():
                latency = gr.LinePlot(
                    x="time", y="ms", color="result", title="Latency 延迟 (ms)", height=260,
                    color_map={"hit": "#15803d", "miss": "#b45309", "bypass": "#475569", "error": "#b91c1c",
                               "composed": "#1d4ed8"},
                )  # fmt: skip
                hit_rate = gr.LinePlot(x="time", y="hit_rate", title="Hit rate 命中率 (%, last 20)", height=260)
            with gr.Row():
                top_requested = gr.Dataframe(label="Most requested 最常请求", interactive=False)
                top_missed = gr.Dataframe(label="Most missed 最常未命中", interactive=False)
            with gr.Row():
                export = gr.Button("Export top phrases as hot_phrases.json 导出热门短语")
                export_file = gr.File(label="hot_phrases.json", interactive=False)
            export_message = gr.Markdown()
            with gr.Accordion("Admin 管理", open=False):
                confirm = gr.Checkbox(False, label="I understand: this changes the cache for every user 我已确认")
                token = gr.Textbox(
                    label=f"Admin token (only when {token_env} is set; also shows the phrase tables and allows "
                    "the export, which hold users' texts)",
                    type="password",
                )
                tag = gr.Textbox(value=service.tag, label="Model tag to evict (engine:model_version or voice:<id>)")
                with gr.Row():
                    clear_btn = gr.Button("Clear all 清空缓存", variant="stop")
                    evict_btn = gr.Button("Evict model version 按模型版本清除")
                    sweep_btn = gr.Button("Sweep expired 清理过期")
                    verify_btn = gr.Button("Verify 校验")
                admin_result = gr.Markdown()
            outputs = [stats, latency, hit_rate, top_requested, top_missed]
            for trigger in (refresh.click, cache_tab.select):
                trigger(h.refresh_cache, inputs=token, outputs=outputs, api_visibility="private")
            gr.Timer(10.0).tick(
                h.refresh_cache, inputs=token, outputs=outputs, api_visibility="private", show_progress="hidden"
            )
            for button, action, handler in (
                (clear_btn, "clear", h.admin_clear), (evict_btn, "evict", h.admin_evict),
                (sweep_btn, "sweep", h.admin_sweep), (verify_btn, "verify", h.admin_verify),
            ):  # fmt: skip
                button.click(
                    handler,
                    inputs=[confirm, token, tag],
                    outputs=[admin_result, confirm],
                    api_name=f"admin_{action}",
                ).then(h.refresh_cache, inputs=token, outputs=outputs, api_visibility="private")
            export.click(h.export_top, inputs=token, outputs=[export_file, export_message], api_name="export_phrases")

        with gr.Tab("预加载 Preload"):
            gr.Markdown(
                f"Run a hot-phrase list through the cache; cached phrases are skipped. Without an upload the "
                f"shipped list `{phrases_path.name}` is used (its prompt paths are relative to it)."
            )
            upload = gr.File(label="Phrase list (optional) 短语列表", file_types=[".json"], type="filepath")
            with gr.Row():
                force = gr.Checkbox(False, label="Force: regenerate cached phrases (admin) 强制重新生成")
                preload_token = gr.Textbox(
                    label=f"Admin token, to force (only when {token_env} is set)", type="password"
                )
            start = gr.Button("Run preload 开始预加载", variant="primary")
            preload_result = gr.Markdown(elem_id="preload-result")
            start.click(
                h.run_preload, inputs=[upload, force, preload_token], outputs=preload_result, api_name="preload"
            )
        demo.load(h.refresh_cache, inputs=token, outputs=outputs, api_visibility="private")
        demo.load(lambda: h.voice_updates()[:2], outputs=[voice, voice_pick], api_visibility="private")
    return demo


def create_app(service: TTSService, *, phrases_path: Path = DEFAULT_PHRASES) -> FastAPI:
    """The HTTP API with the UI mounted at ``/``: both on one port."""
    app = create_api(service)

    def mount() -> FastAPI:
        demo = build_demo(service, phrases_path=phrases_path)
        mounted: FastAPI = gr.mount_gradio_app(app, demo, path="/", css=_CSS, footer_links=["api"])
        return mounted

    async def mount_in_a_loop() -> FastAPI:
        return mount()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # Gradio makes asyncio locks while mounting; outside a running loop it creates
        # (and never closes) event loops of its own for them. Inside one it does not,
        # and the locks bind to the server's loop on first use.
        return asyncio.run(mount_in_a_loop())
    return mount()


# --- command line -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="webui.py",
        description="Voice-cloning TTS: web UI and HTTP API on one port.",
        epilog="Precedence: defaults < config.yaml < TTS_* environment variables < these flags.",
    )
    add_config_flags(parser, server=True)
    parser.add_argument("--clear-cache", action="store_true", help="clear the cache, report, and exit")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
        service = TTSService(config)
    except TTSError as exc:
        print(f"webui: {exc}", file=sys.stderr)
        return 2
    if args.clear_cache:
        done = service.clear()
        service.close()
        print(f"cleared {done['removed']} entries from {config.cache.dir}")
        return 0
    from lib.api.serving import serve

    app = create_app(service)
    _LOGGER.info("serving %s on http://%s:%d/", service.tag, config.server.host, config.server.port)
    started = time.time()
    try:
        serve(app, config.server, log_level="warning")
    finally:
        service.close()
        _LOGGER.info("stopped after %.0f s", time.time() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
