#!/usr/bin/env python3
"""The operator web UI: a thin Gradio front on :class:`lib.service.TTSService`.

``build_demo(service)`` builds the Blocks; ``create_app(service)`` serves it at ``/``
next to the HTTP API (``lib.api``) on one port; ``main()`` parses the command line and
runs uvicorn. Importing this module has no side effects.

Configuration precedence, lowest first: built-in defaults < ``config.yaml`` (or
``--config``) < ``TTS_*`` environment variables < command-line flags.
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd
from fastapi import FastAPI

from lib.api import create_app as create_api
from lib.api.admin import is_loopback
from lib.audio import FORMATS
from lib.errors import TTSError, ValidationError
from lib.phrases import PreloadReport, expand, export_phrases, load_phrases, preload
from lib.request import MAX_SEED, MAX_SPEED, MIN_SPEED, TTSRequest
from lib.service import TTSService
from lib.shared.report import status_markdown

__all__ = ["admin_refusal", "build_demo", "build_request", "create_app", "main"]

_LOGGER = logging.getLogger("webui")

HERE = Path(__file__).resolve().parent
DEFAULT_PHRASES = HERE / "hot_phrases.json"

#: (label, value): handlers receive the value, never the label text.
MODE_CHOICES = [
    ("零样本克隆 Zero-shot clone (prompt audio + its transcript)", "zero_shot"),
    ("跨语种克隆 Cross-lingual clone (prompt audio, no transcript)", "cross_lingual"),
    ("指令控制 Instruct (voice + style instruction)", "instruct"),
    ("预置/已存音色 Preset or saved voice", "preset"),
]
_BADGE_COLOURS = {"HIT": "#15803d", "MISS": "#b45309", "BYPASS": "#475569"}
_CSS = ".cache-badge{display:inline-block;padding:4px 14px;border-radius:999px;font-weight:700;color:#fff}"


# --- pure helpers (tested directly) ------------------------------------------------------


def build_request(
    mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str, style: str,
    seed: float | None, speed: float, fmt: str, use_cache: bool,
) -> TTSRequest:  # fmt: skip
    """Turn the form into a request. Which voice fields count depends on the mode: a
    preset or saved voice in ``preset`` mode; otherwise the prompt audio, or a voice
    from the dropdown when no audio is given."""
    if seed is None or float(seed) != int(seed):
        raise ValidationError(f"seed: must be a whole number from 0 to {MAX_SEED}")
    if mode not in {value for _, value in MODE_CHOICES}:
        raise ValidationError("mode: pick one of the four modes")
    voice = (voice or "").strip() or None
    if mode == "preset":
        if voice is None:
            raise ValidationError("voice: pick a preset or saved voice from the dropdown (音色)")
        prompt_audio = None
    elif prompt_audio:
        voice = None
    elif voice is None:
        raise ValidationError("prompt audio: upload or record a prompt (参考音频), or pick a saved voice")
    return TTSRequest(
        text=text or "", prompt_audio=prompt_audio, voice=voice,
        prompt_text=(prompt_text or "") if mode == "zero_shot" else "",
        style=style or "", seed=int(seed), speed=float(speed), mode=mode, format=fmt, use_cache=bool(use_cache),
    )  # fmt: skip


def admin_refusal(expected: str, token: str | None, client: str, token_env: str) -> str | None:
    """Why an admin action is refused, or None. The same rule as the HTTP API: with a
    token configured it must match; without one, only this machine may act."""
    if expected:
        if not hmac.compare_digest(expected.encode(), (token or "").encode()):
            return f"admin token: wrong or missing; give the value of {token_env}"
        return None
    if not is_loopback(client):
        return f"admin actions from another machine need a token: set {token_env} on the server"
    return None


def badge_html(cache: str) -> str:
    colour = _BADGE_COLOURS.get(cache, "#475569")
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
        f"**Engine 引擎**: `{snap['tag']}`",
    ]
    if not snap.get("cache_available", True):
        lines.append(f"\n**Cache unavailable** (serving without it): {snap.get('cache_error')}")
    shared = status_markdown(snap.get("shared"))
    if shared:
        lines.append("\n" + shared)
    return "\n".join(lines)


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


def _top_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [(r["count"], r["text"], r["voice"], r["key"]) for r in rows], columns=["count", "text", "voice", "key"]
    )


# --- the UI -----------------------------------------------------------------------------


def build_demo(service: TTSService, *, phrases_path: Path = DEFAULT_PHRASES) -> gr.Blocks:
    """The Blocks app for ``service``; every handler is one call into ``lib``."""
    token_env = service.config.server.admin_token_env

    def voice_names() -> list[str]:
        return [v["name"] for v in service.list_voices()]

    def saved_names() -> list[str]:
        return [v["name"] for v in service.list_voices() if v["kind"] == "saved"]

    def synthesise(
        mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str, style: str,
        seed: float | None, speed: float, fmt: str, use_cache: bool, progress: gr.Progress = gr.Progress(),  # noqa: B008
    ) -> tuple[str, str, str]:  # fmt: skip
        progress(0.1, desc="Synthesising 合成中…")
        try:
            request = build_request(mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache)
            result = service.synthesise(request)
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        progress(0.9, desc="Encoding")
        path = result.path
        if fmt != "wav":
            path = path.with_suffix(f".{fmt}")
            if not path.exists():
                path.write_bytes(service.audio_bytes(result.audio, fmt))
        t = result.timings
        details = (
            f"**Key 键**: `{result.key}`  \n**Time 用时**: {t.get('total', 0):.1f} ms"
            + (f" (engine {t['engine']:.1f} ms)" if "engine" in t else "")
            + f"  \n**Audio 音频**: {result.duration:.2f} s at {result.sample_rate} Hz"
        )
        notes = {k: v for k, v in result.info.items() if v not in ([], "", None)}
        if notes:
            details += f"  \n**Notes 说明**: `{json.dumps(notes, ensure_ascii=False)}`"
        return str(path), badge_html(result.cache), details

    def roll_seed() -> int:
        return random.randint(0, MAX_SEED)

    def save_voice(name: str, prompt_audio: str | None, prompt_text: str) -> tuple[Any, Any, Any, str]:
        try:
            saved = service.save_voice(name or "", prompt_audio, prompt_text or "")
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        return (*_voice_updates(), f"Saved voice **{saved['name']}** ({saved['seconds']} s) 已保存")

    def delete_voice(name: str | None) -> tuple[Any, Any, Any, str]:
        try:
            service.delete_voice(name or "")
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        return (*_voice_updates(), f"Deleted voice **{name}** 已删除")

    def play_voice(name: str | None) -> str:
        if not name:
            raise gr.Error("pick a voice to play")
        try:
            sample = (
                "你好，欢迎光临。Hello and welcome."
                if service.is_preset(name)
                else "你好，这是我的声音。This is my voice."
            )
            return str(service.synthesise(TTSRequest(text=sample, voice=name)).path)
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc

    def voices_table() -> pd.DataFrame:
        rows = [(v["name"], v["kind"], v.get("seconds", ""), v.get("prompt_text", "")) for v in service.list_voices()]
        return pd.DataFrame(rows, columns=["name", "kind", "seconds", "prompt_text"])

    def _voice_updates() -> tuple[Any, Any, Any]:
        names = voice_names()
        return gr.update(choices=names), gr.update(choices=names, value=None), voices_table()

    def refresh_cache() -> tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        snap = service.snapshot(top=20)
        samples = list(service.stats.samples)
        return (
            stats_markdown(snap), latency_frame(samples), hit_rate_frame(samples),
            _top_frame(snap["top_requested"]), _top_frame(snap["top_missed"]),
        )  # fmt: skip

    def admin(action: str, confirmed: bool, token: str, tag: str, request: gr.Request) -> tuple[str, bool]:
        if not confirmed:
            raise gr.Error("tick 'I understand 我已确认' first: this changes the cache for every user")
        client = request.client.host if request is not None and request.client else ""
        refusal = admin_refusal(os.environ.get(token_env, ""), token, client, token_env)
        if refusal:
            raise gr.Error(refusal)
        try:
            if action == "clear":
                done = service.clear()
            elif action == "evict":
                done = service.evict((tag or "").strip())
            elif action == "sweep":
                done = service.sweep_expired()
            else:
                done = service.verify()
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        _LOGGER.warning("admin action %s from the web UI: %s", action, done)
        return f"**{action}**: `{json.dumps(done, ensure_ascii=False)}`", False

    def admin_handler(action: str) -> Any:
        # A named function, not functools.partial: Gradio finds gr.Request by signature.
        def handler(confirmed: bool, token: str, tag: str, request: gr.Request) -> tuple[str, bool]:
            return admin(action, confirmed, token, tag, request)

        return handler

    def export_top() -> tuple[str, str]:
        document, notes = export_phrases(service, top=50)
        if not document["phrases"]:
            raise gr.Error("nothing to export yet: no phrase in the statistics can be rebuilt from its voice")
        target = Path(tempfile.mkdtemp(prefix="tts-export-")) / "hot_phrases.json"
        target.write_text(json.dumps(document, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        message = f"Exported {len(document['phrases'])} phrases 已导出."
        if notes:
            message += " Skipped:\n" + "\n".join(f"- {n}" for n in notes[:20])
        return str(target), message

    def run_preload(upload: str | None, force: bool, progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008
        path = Path(upload) if upload else phrases_path
        try:
            requests = expand(load_phrases(path))
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        progress((0, len(requests)), desc="Preloading 预加载", unit="phrases")

        def step(report: PreloadReport) -> None:
            progress((report.total, len(requests)), desc="Preloading 预加载", unit="phrases")

        report = preload(service, requests, workers=1, force=force, on_done=step)
        lines = [f"`{report.summary()}`"] + [f"- {entry}: {message}" for entry, message in report.failures[:20]]
        return "\n".join(lines)

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
                        voice_names(), value=None, label="Preset or saved voice 音色", allow_custom_value=True
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
                    output = gr.Audio(type="filepath", label="Result 结果", interactive=False, elem_id="result-audio")
                    badge = gr.HTML(elem_id="cache-badge")
                    details = gr.Markdown(elem_id="result-details")
            dice.click(roll_seed, outputs=seed, api_visibility="private")
            generate.click(
                synthesise,
                inputs=[mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache],
                outputs=[output, badge, details],
                api_name="synthesise",
                concurrency_limit=4,
            )

        with gr.Tab("音色 Voices"):
            gr.Markdown("Save the prompt from the Synthesise tab (audio and transcript) as a named voice.")
            with gr.Row():
                voice_name = gr.Textbox(label="Voice name 音色名称", scale=3)
                save = gr.Button("Save current prompt 保存音色", variant="primary", scale=1)
            voice_table = gr.Dataframe(voices_table, label="Voices 音色列表", interactive=False)
            with gr.Row():
                voice_pick = gr.Dropdown(voice_names(), value=None, label="Voice 音色", allow_custom_value=True)
                play = gr.Button("Play 试听")
                delete = gr.Button("Delete 删除", variant="stop")
            voice_audio = gr.Audio(type="filepath", label="Sample 试听", interactive=False)
            voice_message = gr.Markdown()
            save.click(
                save_voice, inputs=[voice_name, prompt_audio, prompt_text],
                outputs=[voice, voice_pick, voice_table, voice_message], api_name="save_voice",
            )  # fmt: skip
            delete.click(
                delete_voice, inputs=voice_pick, outputs=[voice, voice_pick, voice_table, voice_message],
                api_name="delete_voice",
            )  # fmt: skip
            play.click(play_voice, inputs=voice_pick, outputs=voice_audio, api_visibility="private")

        with gr.Tab("缓存 Cache") as cache_tab:
            stats = gr.Markdown(elem_id="cache-stats")
            refresh = gr.Button("Refresh 刷新")
            with gr.Row():
                latency = gr.LinePlot(
                    x="time", y="ms", color="result", title="Latency 延迟 (ms)", height=260,
                    color_map={"hit": "#15803d", "miss": "#b45309", "bypass": "#475569", "error": "#b91c1c"},
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
                token = gr.Textbox(label=f"Admin token (only when {token_env} is set)", type="password")
                tag = gr.Textbox(value=service.tag, label="Model tag to evict (engine:model_version or voice:<id>)")
                with gr.Row():
                    clear_btn = gr.Button("Clear all 清空缓存", variant="stop")
                    evict_btn = gr.Button("Evict model version 按模型版本清除")
                    sweep_btn = gr.Button("Sweep expired 清理过期")
                    verify_btn = gr.Button("Verify 校验")
                admin_result = gr.Markdown()
            outputs = [stats, latency, hit_rate, top_requested, top_missed]
            for trigger in (refresh.click, cache_tab.select):
                trigger(refresh_cache, outputs=outputs, api_visibility="private")
            gr.Timer(10.0).tick(refresh_cache, outputs=outputs, api_visibility="private", show_progress="hidden")
            for button, action in ((clear_btn, "clear"), (evict_btn, "evict"), (sweep_btn, "sweep"),
                                   (verify_btn, "verify")):  # fmt: skip
                button.click(
                    admin_handler(action),
                    inputs=[confirm, token, tag],
                    outputs=[admin_result, confirm],
                    api_name=f"admin_{action}",
                ).then(refresh_cache, outputs=outputs, api_visibility="private")
            export.click(export_top, outputs=[export_file, export_message], api_name="export_phrases")

        with gr.Tab("预加载 Preload"):
            gr.Markdown(
                f"Run a hot-phrase list through the cache; cached phrases are skipped. Without an upload the "
                f"shipped list `{phrases_path.name}` is used (its prompt paths are relative to it)."
            )
            upload = gr.File(label="Phrase list (optional) 短语列表", file_types=[".json"], type="filepath")
            force = gr.Checkbox(False, label="Force: regenerate cached phrases 强制重新生成")
            start = gr.Button("Run preload 开始预加载", variant="primary")
            preload_result = gr.Markdown(elem_id="preload-result")
            start.click(run_preload, inputs=[upload, force], outputs=preload_result, api_name="preload")
        demo.load(refresh_cache, outputs=outputs, api_visibility="private")
        demo.load(lambda: _voice_updates()[:2], outputs=[voice, voice_pick], api_visibility="private")
    return demo


def create_app(service: TTSService, *, phrases_path: Path = DEFAULT_PHRASES) -> FastAPI:
    """The HTTP API with the UI mounted at ``/``: both on one port."""
    app = create_api(service)
    demo = build_demo(service, phrases_path=phrases_path)
    mounted: FastAPI = gr.mount_gradio_app(app, demo, path="/", css=_CSS, footer_links=["api"])
    return mounted


# --- command line -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="webui.py",
        description="Voice-cloning TTS: web UI and HTTP API on one port.",
        epilog="Precedence: defaults < config.yaml < TTS_* environment variables < these flags.",
    )
    parser.add_argument("--config", help="config file (default: config.yaml if present)")
    parser.add_argument("--host", help="interface to bind (default 127.0.0.1; server.host)")
    parser.add_argument("--port", type=int, help="TCP port (default 7860; server.port)")
    parser.add_argument("--cache-dir", help="cache directory (default cosyvoice_cache; cache.dir)")
    parser.add_argument("--engine", help="builtin, cosyvoice or tone (engine)")
    parser.add_argument("--model-dir", help="CosyVoice model directory (cosyvoice.model_dir)")
    parser.add_argument("--shared-url", help="redis:// URL of the shared cache tier (cache.shared_url)")
    parser.add_argument("--clear-cache", action="store_true", help="clear the cache, report, and exit")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from lib.config import load_config

    config_path = args.config or ("config.yaml" if Path("config.yaml").is_file() else None)
    try:
        config = load_config(
            config_path,
            overrides={
                "server.host": args.host, "server.port": args.port, "cache.dir": args.cache_dir,
                "engine": args.engine, "cosyvoice.model_dir": args.model_dir, "cache.shared_url": args.shared_url,
            },
        )  # fmt: skip
        service = TTSService(config)
    except TTSError as exc:
        print(f"webui: {exc}", file=sys.stderr)
        return 2
    if args.clear_cache:
        done = service.clear()
        service.close()
        print(f"cleared {done['removed']} entries from {config.cache.dir}")
        return 0
    import uvicorn

    app = create_app(service)
    _LOGGER.info("serving %s on http://%s:%d/", service.tag, config.server.host, config.server.port)
    started = time.time()
    try:
        uvicorn.run(app, host=config.server.host, port=config.server.port, log_level="warning")
    finally:
        service.close()
        _LOGGER.info("stopped after %.0f s", time.time() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
