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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gradio as gr
from fastapi import FastAPI
from starlette.routing import Mount

from lib.api import create_app as create_api
from lib.api.errors import install_routing_errors
from lib.audio.pcm import FORMATS
from lib.batch.background import BackgroundPreload
from lib.cli import add_config_flags, config_from_args
from lib.engines.base import can_convert
from lib.errors import TTSError
from lib.pipeline.service import TTSService
from lib.request.access import ANYONE, LOCAL
from lib.request.validate import MAX_SEED, MAX_SPEED, MIN_SPEED
from lib.ui.forms import (
    MODE_FORMS,
    build_request,
    default_voice,
    examples,
    mode_choices,
    sample_text,
    style_used,
    voice_choices,
)
from lib.ui.handlers import BUTTON_LABELS, HISTORY, LIVE_NOTICE, Handlers, live_playback_available
from lib.ui.health import TITLE, live_health
from lib.ui.page import PageLanguage
from lib.ui.plots import WINDOWS
from lib.ui.preload_tab import background_progress, preload_tab
from lib.ui.queue import QUEUE_JS, queue_add_row, queue_panel
from lib.ui.readings_panel import ReadingsPanel, reading_line, readings_panel
from lib.ui.signin import signin_section
from lib.ui.takes_panel import MAX_UI_TAKES, TakesPanel, review_section, takes_section
from lib.ui.tempdir import private_gradio_dir
from lib.ui.theme import CSS, FORGET_PRESS, JS, LANG, PLAY_RESULT, SHOW_CONFIRM, SHOW_RESULT, theme
from lib.ui.views import engine_title

__all__ = ["build_demo", "build_request", "create_app", "live_playback_available", "main"]

_LOGGER = logging.getLogger("webui")

HERE = Path(__file__).resolve().parent
DEFAULT_PHRASES = HERE / "hot_phrases.json"


def build_demo(
    service: TTSService, *, phrases_path: Path = DEFAULT_PHRASES, preload: BackgroundPreload | None = None
) -> gr.Blocks:
    """The Blocks app for ``service``; every event calls one method of :class:`Handlers`.
    ``preload``: the start-up preload whose progress the banner and the Preload tab show."""
    h = Handlers(service, phrases_path)
    private_gradio_dir(service.files)  # before any Blocks or component reads GRADIO_TEMP_DIR
    demo = gr.Blocks(title="语音克隆合成 Voice cloning TTS", analytics_enabled=False)
    engine = engine_title(service.engine.name, str(getattr(service.engine, "base", "")))
    with demo:
        header = gr.Markdown(f"{TITLE}\n引擎 Engine：{engine}", elem_id="page-header")
        health = gr.HTML(elem_id="health-banner", js_on_load=None)
        banner = gr.HTML(elem_id="preload-banner", js_on_load=None)
        token = signin_section(h)  # one admin sign-in, read by every admin action below
        with gr.Tabs():
            with gr.Tab("合成 Synthesise", id="synth"):
                mode, voice = _synthesise_tab(h, token)
            with gr.Tab("音色 Voices", id="voices"):
                delete_pick = _voices_tab(h, demo, mode, voice, token)
            with gr.Tab("缓存 Cache", id="cache") as cache_tab:
                refresh_cache = _cache_tab(h, demo, cache_tab, token)
            with gr.Tab("预加载 Preload", id="preload"):
                preloaded, startup = preload_tab(h, token)
                refresh_cache(preloaded.success)  # the figures say what the preload did
        background_progress(preload or BackgroundPreload.none(), banner, startup, demo)
        live_health(service, header, health, demo)
        demo.load(None, js=QUEUE_JS)  # the play queue (lib.ui.queue): kept in the browser
        demo.load(lambda: h.voice_updates()[:2], outputs=[voice, delete_pick], api_visibility="private")
    return demo


def _synthesise_tab(h: Handlers, token: gr.Textbox) -> tuple[gr.Radio, gr.Dropdown]:
    """The form on the left; the button, the result and its badge on the right (kept in
    view on wide screens, right under the button on phones); recent results below."""
    service, engine = h.service, h.service.engine
    live_ok = h.live_player
    presets = engine.presets()
    modes = mode_choices(engine.modes, converts=can_convert(engine))
    first_mode = "preset" if "preset" in engine.modes else modes[0][1]
    first_voice = default_voice(presets) if first_mode == "preset" else None
    first = MODE_FORMS[first_mode]
    history = gr.State([])
    readings = ReadingsPanel(h)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=340):
            mode = gr.Radio(modes, value=first_mode, label="模式 Mode", elem_id="mode")
            steps = gr.Markdown(h.form_note(first_mode, None, first_voice, "", ""), elem_id="mode-steps")
            voice = gr.Dropdown(
                voice_choices(service.voices.list(caller=ANYONE)), value=first_voice, label=first.voice_label,
                elem_id="voice",
                allow_custom_value=True, render=False,  # custom: voices saved after start are valid from any client
            )  # fmt: skip
            source = gr.Audio(
                sources=["upload", "microphone"], type="filepath", elem_id="source-audio", render=False,
                label=f"源录音 Source recording: the speech to convert (up to {service.config.prompt.max_seconds:g} s)",
                visible=first.source,
            )  # fmt: skip
            prompt_audio = gr.Audio(
                sources=["upload", "microphone"], type="filepath", elem_id="prompt-audio", render=False,
                label=first.prompt_label, visible=first.prompt_audio,
            )  # fmt: skip
            prompt_text = gr.Textbox(
                label="参考音频文本 Prompt transcript (exactly what the recording says)",
                elem_id="prompt-text", visible=first.transcript, render=False,
            )  # fmt: skip
            text = gr.Textbox(
                value=sample_text(first_voice), label="合成文本 Text to speak", lines=3, elem_id="tts-text",
                info="Ctrl+Enter 合成 Synthesise", render=False,
            )  # fmt: skip
            style = gr.Textbox(
                label="风格指令 Style instruction（可选 optional, e.g. 'slow, calm' / '开心'）",
                elem_id="style", visible=style_used(first_mode, engine.style_modes), render=False,
            )  # fmt: skip
            rows, labels = examples(presets, engine.modes, h.shipped_phrases())
            examples_shown = None
            if rows:
                examples_shown = gr.Examples(
                    rows, inputs=[mode, voice, text, style], example_labels=labels, elem_id="examples",
                    label="示例：点一下即可试听 Examples: one click to hear a voice", examples_per_page=8,
                )  # fmt: skip
            for field in (source, voice, prompt_audio, prompt_text, text, style):
                field.render()  # type: ignore[no-untyped-call]  # below the examples, which need them first
                if field is text:
                    line = reading_line(readings, text.value, first_voice)  # what the engine will say
            with gr.Row():
                # A text box: Gradio 6's number box shows and sends 0 when empty, and an
                # empty seed is the default that names none (the approved take, else 0).
                seed = gr.Textbox(
                    value="", label=f"随机种子 Seed (0–{MAX_SEED})", elem_id="seed", scale=2, lines=1, max_lines=1,
                    placeholder="留空：已审核版本，否则 0 Empty: the approved take, else 0",
                )  # fmt: skip
                dice = gr.Button("随机 Random", scale=1, min_width=110, elem_id="dice")
                speed = gr.Number(
                    value=1.0, step=0.05, label=f"语速 Speed ({MIN_SPEED}–{MAX_SPEED})", elem_id="speed", scale=2
                )
            with gr.Row():
                # Every file format; not raw pcm, which no player opens (it is for the API).
                files = [f for f in FORMATS if f != "pcm"]
                fmt = gr.Dropdown(files, value="wav", label="格式 Format", elem_id="format")
                use_cache = gr.Checkbox(value=True, label="使用缓存 Use cache", elem_id="use-cache")
            readings_panel(readings, text, voice, line, token)
        with gr.Column(scale=2, min_width=320, elem_id="result-panel"):
            generate = gr.Button(BUTTON_LABELS[False], variant="primary", size="lg", elem_id="generate")
            convert = gr.Button(BUTTON_LABELS[True], variant="primary", size="lg", elem_id="convert", visible=False)
            message = gr.HTML(elem_id="result-message", js_on_load=None)
            badge = gr.HTML(elem_id="cache-badge", js_on_load=None)
            notice = gr.Markdown(visible=False, elem_id="style-notice", elem_classes="ui-notice")
            # While a result plays live, how many of its sentences are made: a line of its own
            # that a timer fills (an output of the playing event re-rendered the page under the
            # player).
            count = gr.HTML(elem_id="live-count", js_on_load=None)
            ticker = gr.Timer(0.5, active=False)
            # Shown only while a long miss plays as it is made (lib.ui.playback); hidden, it
            # is not rendered, so each live result gets a new element that starts at 0.
            live = gr.Audio(
                streaming=True, autoplay=True, label="实时播放 Live (边合成边播放 while it is made)",
                interactive=False, elem_id="live-audio", visible=False,
            ) if live_ok else gr.Markdown(LIVE_NOTICE, elem_id="live-notice")  # fmt: skip
            # The browser's own player: the page script plays each new result once, from 0
            # (PLAY_RESULT); Gradio's waveform player keeps its element out of reach.
            output = gr.Audio(
                type="filepath",
                label="结果 Result",
                interactive=False,
                elem_id="result-audio",
                buttons=["download"],
                waveform_options=gr.WaveformOptions(show_recording_waveform=False),
            )
            details = gr.Markdown(elem_id="result-details")
            queue_add_row()  # the result into the play queue (repeat count, chime)
            # Under the result (the result keeps its place under the button on a phone).
            with gr.Row(elem_id="takes-controls"):
                try_takes = gr.Button("试听多个版本 Try takes", elem_id="try-takes", scale=2, min_width=160)
                takes_n = gr.Slider(2, MAX_UI_TAKES, value=3, step=1, label="版本数 Takes", elem_id="takes-n", scale=1)
    form = [mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache]
    takes_section(TakesPanel(h), try_takes, takes_n, form, token)  # N takes of the form, side by side
    # 播放队列 Queue: the announcements of the day, in order (full width: in the result
    # column it made the column taller than the form, which then no longer stuck beside it).
    queue_panel()
    with gr.Accordion("最近结果（本页会话）Recent results in this session", elem_id="history"), gr.Row():
        players = [
            gr.Audio(
                type="filepath", interactive=False, visible=False, elem_id=f"history-{i}", buttons=["download"],
                min_width=240,
            )
            for i in range(HISTORY)
        ]  # fmt: skip

    convert_form = [source, prompt_audio, voice, seed, speed, fmt, use_cache]

    def request_chain(trigger: Any, api_name: str | None, *, streamed: bool, converts: bool = False) -> None:
        """First clear the result (and list the form's problems), then run: whole, or
        played live sentence by sentence (``streamed``) into the live player; or convert
        the source recording (``converts``), with the same outputs."""
        shown = [output, badge, details, notice, history]
        cleared = [output, badge, details, notice, message]
        inputs = convert_form if converts else form
        run_it = h.convert if converts else h.synthesise_live if streamed else h.synthesise
        button = convert if converts else generate
        trigger(h.pressed, inputs=mode, queue=False, show_progress="hidden", api_visibility="private")  # its form
        counted = streamed and live_ok  # may play live: its count's line and timer
        run = trigger(
            h.clearer(converts, live=live_ok, counted=counted), inputs=inputs,
            outputs=[*cleared, live, button] + ([ticker, count] if counted else []) if live_ok else [*cleared, button],
            queue=False, show_progress="hidden", api_visibility="private", js=SHOW_RESULT,
        ).then(
            run_it, inputs=[*inputs, history], outputs=[live, *shown] if streamed else shown,
            validator=h.validate_convert if converts else h.validate, show_progress_on=[output],
            concurrency_limit=4, api_name=api_name, api_visibility="public" if api_name else "private",
        )  # fmt: skip
        run.success(None, js=PLAY_RESULT, api_visibility="private")
        run.success(h.history_view, inputs=history, outputs=players, api_visibility="private")
        run.failure(h.failure_view("synth"), outputs=message, api_visibility="private")
        # Gradio's .then() does not follow a failure.
        for ended, succeeded in ((run.success, True), (run.failure, False)):
            ended(h.idle(converts), outputs=button, queue=False, show_progress="hidden", api_visibility="private")
            if counted:
                ended(
                    h.live_count_end(succeeded), outputs=[ticker, count], queue=False,
                    show_progress="hidden", api_visibility="private",
                )  # fmt: skip

    # The live count's tick, while a request that may play live runs (the press starts it).
    ticker.tick(h.live_count, outputs=count, queue=False, show_progress="hidden", api_visibility="private")

    # /synthesise answers the whole result (API clients); the button plays it live when it can.
    whole = gr.Button(visible=False) if live_ok else generate
    request_chain(whole.click, "synthesise", streamed=False)
    if live_ok:
        request_chain(generate.click, "synthesise_live", streamed=True)
    request_chain(text.submit, None, streamed=live_ok)  # Shift+Enter in the text box
    request_chain(convert.click, "convert", streamed=False, converts=True)
    if examples_shown is not None:
        request_chain(examples_shown.load_input_event.then, None, streamed=live_ok)
    dice.click(h.roll_seed, outputs=seed, api_visibility="private")
    note_inputs = [mode, prompt_audio, voice, prompt_text, style]
    rechecked = [prompt_audio, source, voice, prompt_text, text, style]
    mode.change(
        h.mode_form, inputs=note_inputs,
        outputs=[prompt_audio, prompt_text, voice, style, steps, source, text, generate, convert, live],
        api_visibility="private", show_progress="hidden",
    ).then(  # the messages Gradio shows at the fields named the form left behind
        lambda *values: None, inputs=rechecked, validator=h.clear_fields, show_progress="hidden",
        api_visibility="private",
    )  # fmt: skip
    # A file that is not audio, refused by the page script on a recording field, takes the
    # last result away (the page script presses this hidden button; FORGET_PRESS: a result
    # still on its way does not play).
    refused = gr.Button("refused", elem_id="result-refused", elem_classes=["result-refused"])
    refused.click(
        h.result_refused, outputs=[output, badge, details, notice, live], queue=False, show_progress="hidden",
        api_visibility="private", js=FORGET_PRESS,
    )  # fmt: skip
    # A switch by the operator (not an example setting the mode) discards the result area
    # and any request still running (its result belongs to a form no longer shown), and
    # the field messages that belong to the form left behind; the seed's and speed's own
    # checks are run again (they apply in every mode).
    mode.input(
        h.mode_switched, inputs=mode, outputs=[output, badge, details, notice, message, live, generate, convert],
        queue=False,
        show_progress="hidden", api_visibility="private", js=FORGET_PRESS,
    )  # fmt: skip
    # The transcript and style are hidden in the modes that ignore them, so only a mode
    # change (above), an upload or a voice choice can change what the notes say.
    for changed in (prompt_audio.change, voice.change):
        changed(h.form_note, inputs=note_inputs, outputs=steps, api_visibility="private", show_progress="hidden")
    # Checked as typed: on change, not on blur (a message appearing when the field loses
    # the focus to a click on Synthesise would move the button away from the click).
    for number, note in ((seed, h.seed_note), (speed, h.speed_note)):
        number.change(
            note, inputs=number, outputs=number, api_visibility="private", trigger_mode="always_last",
            show_progress="hidden", queue=False,
        )  # fmt: skip
    return mode, voice


def _voices_tab(h: Handlers, demo: gr.Blocks, mode: gr.Radio, voice: gr.Dropdown, token: gr.Textbox) -> gr.Dropdown:
    """Save a recording under a name, play every voice, delete saved ones (confirmed)."""
    version = gr.State(0)
    gr.Markdown(
        "**操作步骤 Steps**：① 上传或录制 3–10 秒说话声 Upload or record 3–10 s of speech → ② 填写录音里说的话"
        "（零样本克隆需要）Type what it says (zero-shot needs it) → ③ 起名并保存 Name it and save. "
        "已存音色会出现在「合成」页的音色列表中 Saved voices appear in the Synthesise tab."
    )
    with gr.Row():
        with gr.Column(scale=3, min_width=320):
            new_audio = gr.Audio(
                sources=["upload", "microphone"], type="filepath", label="要保存的声音 Voice to save (3–10 s)",
                elem_id="voice-audio",
            )  # fmt: skip
            transcript = gr.Textbox(label="录音文本 Transcript of the recording", elem_id="voice-text")
        with gr.Column(scale=2, min_width=280):
            name = gr.Textbox(label="音色名称 Voice name", elem_id="voice-name")
            replace = gr.Checkbox(False, label="替换同名音色（管理员）Replace a voice of this name (admin)")
            save = gr.Button("保存音色 Save voice", variant="primary", elem_id="save-voice")
    message = gr.HTML(elem_id="voice-message", js_on_load=None)
    sample = gr.Audio(type="filepath", label="试听 Sample", interactive=False, autoplay=True, elem_id="voice-sample")

    @gr.render(inputs=[version, token], triggers=[version.change, demo.load, token.blur])  # type: ignore[untyped-decorator]
    def voice_rows(_version: int, admin_token: str, request: gr.Request) -> None:
        for i, v in enumerate(h.voices_for(admin_token, request)):  # transcripts for the admin only
            kind = "预置 preset" if v["kind"] == "preset" else f"已存 saved · {v.get('seconds', '')} s"
            words = f" · “{v['prompt_text']}”" if v.get("prompt_text") else ""
            with gr.Row(equal_height=True, elem_classes="voice-row"):
                gr.Markdown(f"**{v['name']}** · {kind}{words}", elem_id=f"voice-row-{i}")
                play = gr.Button("▶ 试听 Play", size="sm", scale=0, min_width=110, elem_id=f"play-{i}")
            played = play.click(h.player(str(v["name"])), outputs=sample, api_visibility="private")
            played.failure(h.failure_view("voices"), outputs=message, api_visibility="private")

    with gr.Row():
        pick = gr.Dropdown(
            [str(v["name"]) for v in h.service.voices.list(caller=ANYONE) if v["kind"] == "saved"], value=None,
            label="删除已存音色 Delete a saved voice (presets cannot be deleted)", elem_id="delete-pick", scale=3,
            allow_custom_value=True,
        )  # fmt: skip
        delete = gr.Button("删除… Delete…", variant="stop", scale=1, elem_id="delete-voice")
    with gr.Column(visible=False, variant="panel", elem_id="delete-confirm") as confirm_box:
        question = gr.HTML(js_on_load=None, elem_id="delete-question")
        with gr.Row():
            yes = gr.Button("确认删除 Yes, delete", variant="stop", elem_id="confirm-delete")
            no = gr.Button("取消 Cancel", elem_id="cancel-delete")
    outputs = [voice, pick, version, message]
    saving = save.click(
        h.save_voice,
        inputs=[name, new_audio, transcript, replace, token],
        outputs=outputs,
        api_name="save_voice",
        show_progress_on=[message],
    )
    saving.failure(h.failure_view("voices"), outputs=message, api_visibility="private")
    delete.click(
        h.ask_delete, inputs=pick, outputs=[confirm_box, question, message], api_visibility="private"
    ).then(None, js=SHOW_CONFIRM, api_visibility="private")  # fmt: skip
    no.click(lambda: gr.update(visible=False), outputs=confirm_box, api_visibility="private")
    deleting = yes.click(h.delete_voice, inputs=[pick, token], outputs=[*outputs, confirm_box], api_name="delete_voice")
    deleting.failure(h.failure_view("voices"), outputs=message, api_visibility="private")
    deleting.success(h.voice_kept, inputs=[mode, voice], outputs=voice, api_visibility="private")
    return pick


def _cache_tab(h: Handlers, demo: gr.Blocks, tab: gr.Tab, token: gr.Textbox) -> Callable[[Any], None]:
    """Figures, plots and top phrases over a chosen window; export; admin actions.
    Returns what refreshes them and the evict choices after a trigger (a preload's end)."""
    with gr.Row():
        window = gr.Dropdown(WINDOWS, value=WINDOWS[0][1], label="时间范围 Window", elem_id="window", scale=3)
        refresh = gr.Button("刷新 Refresh", scale=1, elem_id="refresh")
    stats = gr.Markdown(elem_id="cache-stats")
    with gr.Row():
        make = gr.Button("生成缺少的 Make the missing ones", elem_id="make-missing", scale=1)
        made = gr.HTML(elem_id="make-missing-result", js_on_load=None)
    with gr.Row():
        latency = gr.Plot(label="延迟 Latency (ms, 对数刻度 log scale)", elem_id="latency-plot", min_width=320)
        hit_rate = gr.Plot(label="命中率 Hit rate (%)", elem_id="hit-rate-plot", min_width=320)
    widths: list[str | int] = ["19%", "21%", "36%", "24%"]  # on a phone, wide enough for "Count", "Missed", "female"
    requested = gr.Dataframe(
        label="最常请求 Most requested (by text and voice; seeds, styles and speeds added up)",
        interactive=False, wrap=True, elem_id="top-requested", column_widths=widths, max_height=360,
    )  # fmt: skip
    missed = gr.Dataframe(
        label="最常未命中 Most missed", interactive=False, wrap=True, elem_id="top-missed", column_widths=widths,
        max_height=360,
    )  # fmt: skip
    with gr.Row():
        export = gr.Button("导出热门短语 Export top phrases as hot_phrases.json", elem_id="export")
        export_file = gr.File(label="hot_phrases.json", interactive=False, elem_id="export-file", visible=False)
    export_message = gr.Markdown(elem_id="export-message")
    with gr.Accordion("管理 Admin", open=False, elem_id="admin"):
        with gr.Group():
            confirm = gr.Checkbox(
                False, label="我已确认：会影响所有用户的缓存 I understand: this changes the cache for everyone",
                elem_id="admin-confirm",
            )  # fmt: skip
            tag = gr.Dropdown(
                [], value=None, label="要清除的模型版本 Model version to evict (as found in the cache)",
                elem_id="evict-tag", allow_custom_value=True,
            )  # fmt: skip
        with gr.Row():
            clear_btn = gr.Button("清空缓存 Clear all", variant="stop", elem_id="admin-clear")
            evict_btn = gr.Button("清除此版本 Evict model version", elem_id="admin-evict")
            sweep_btn = gr.Button("清理过期 Sweep expired", elem_id="admin-sweep")
            verify_btn = gr.Button("校验 Verify", elem_id="admin-verify")
        result = gr.HTML(elem_id="admin-result", js_on_load=None)
    review_section(TakesPanel(h), token, tab)  # approvals made by another model than the serving one
    shown = [stats, latency, hit_rate, requested, missed]

    def refresh_after(trigger: Any) -> None:
        trigger(h.refresh_cache, inputs=[window, token], outputs=shown, api_visibility="private").then(
            h.evict_choices, outputs=tag, api_visibility="private", show_progress="hidden"
        )

    for trigger in (window.change, demo.load, token.blur):
        trigger(h.refresh_cache, inputs=[window, token], outputs=shown, api_visibility="private")
    for trigger in (refresh.click, tab.select):
        refresh_after(trigger)
    gr.Timer(10.0).tick(
        h.refresh_cache, inputs=[window, token], outputs=shown, api_visibility="private", show_progress="hidden"
    )
    for button, action, handler in (
        (clear_btn, "clear", h.admin_clear), (evict_btn, "evict", h.admin_evict),
        (sweep_btn, "sweep", h.admin_sweep), (verify_btn, "verify", h.admin_verify),
    ):  # fmt: skip
        done = button.click(
            lambda: "", outputs=result, queue=False, show_progress="hidden", api_visibility="private"
        ).then(
            handler, inputs=[confirm, token, tag], outputs=[result, confirm], api_name=f"admin_{action}",
            show_progress_on=[result],  # an error never lies over the confirmation box
        )  # fmt: skip
        done.failure(h.failure_view("admin"), outputs=result, api_visibility="private")
        refresh_after(done.success)
    making = make.click(lambda: "", outputs=made, queue=False, show_progress="hidden", api_visibility="private").then(
        h.make_missing, inputs=token, outputs=made, api_name="make_missing", show_progress_on=[made]
    )
    making.failure(h.failure_view("make-missing"), outputs=made, api_visibility="private")
    refresh_after(making.success)
    exporting = export.click(
        h.export_top, inputs=token, outputs=[export_file, export_message], api_name="export_phrases",
        show_progress_on=[export_message],
    )  # fmt: skip
    exporting.success(
        lambda path: gr.update(visible=bool(path)), inputs=export_file, outputs=export_file, api_visibility="private"
    )
    exporting.failure(h.failure_view("export"), outputs=export_message, api_visibility="private")
    return refresh_after


def create_app(
    service: TTSService, *, phrases_path: Path = DEFAULT_PHRASES, preload: BackgroundPreload | None = None
) -> FastAPI:
    """The HTTP API with the UI mounted at ``/``: both on one port. ``preload``: the
    start-up preload (``GET /api/preload``, the UI's banner); started by the caller."""
    app = create_api(service, preload=preload)

    def mount() -> FastAPI:
        demo = build_demo(service, phrases_path=phrases_path, preload=preload)
        mounted: FastAPI = gr.mount_gradio_app(
            app, demo, path="/", theme=theme(), css=CSS, js=JS, footer_links=["api"]
        )  # fmt: skip
        for route in mounted.routes:  # the UI gets every path the API has no route for
            if isinstance(route, Mount) and isinstance(route.app, FastAPI):
                install_routing_errors(route.app)
        mounted.add_middleware(PageLanguage, lang=LANG)  # lang="zh-CN" in the HTML itself
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
    parser.add_argument(
        "--preload", metavar="FILE", type=Path,
        help="preload this phrase list in the background while the UI serves (./run.sh: hot_phrases.json); "
        "progress on the terminal, in the UI and at GET /api/preload",
    )  # fmt: skip
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.preload is not None and not args.preload.is_file():
        print(f"webui: --preload {args.preload}: no such file; name an existing phrase list", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args)
        service = TTSService(config)
    except TTSError as exc:
        print(f"webui: {exc}", file=sys.stderr)
        return 2
    if args.clear_cache:
        done = service.admin.clear(caller=LOCAL)  # the command line: the operator's own
        service.close()
        print(f"cleared {done['removed']} entries from {config.cache.dir}")
        return 0
    from lib.api.serving import serve

    # The engine's model loads and checks itself while the app starts (the first request
    # then finds it ready); close() joins it.
    warm = getattr(service.engine, "warm_in_background", None)
    if callable(warm):
        warm()
    preload = BackgroundPreload(service, args.preload) if args.preload else None
    app = create_app(service, preload=preload)
    _LOGGER.info("serving %s on http://%s:%d/", service.tag, config.server.host, config.server.port)
    started = time.time()
    if preload is not None:  # beside the server: requests are answered from the first second
        preload.start()
    try:
        serve(app, config.server, on_exit=service.watchdog.drain, log_level="warning")
    finally:
        if preload is not None:  # not for long: a stop must not wait for a slow engine call
            preload.stop(timeout=2.0)
        service.close()
        _LOGGER.info("stopped after %.0f s", time.time() - started)
    return 0


if __name__ == "__main__":
    from lib.api.serving import exit_now

    exit_now(main())
