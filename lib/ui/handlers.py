"""The web UI's event handlers: each turns form values into one call to the service and
its answer into component values.

Errors are shown where the operator looks, never as pop-ups that pile up or cover the
form: a handler that fails raises ``gr.Error`` with ``visible=False`` (so API clients
still get the error and its message) and remembers the bilingual message for its
session; the event's ``.failure`` step shows it in the tab's message box
(:meth:`Handlers.failure_view`). Field problems of the Synthesise form are shown at the
fields by the event's validator (:meth:`Handlers.validate`).

Who the caller is (admin or not) is decided by the service's access policy from the
client's address and the admin token typed in the form (:mod:`lib.access`).
"""

from __future__ import annotations

import html
import json
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import gradio as gr

from lib.access import Caller
from lib.errors import TTSError
from lib.export import export_phrases
from lib.phrases import expand, load_phrases
from lib.preload import PreloadReport, preload
from lib.request import TTSRequest
from lib.service import TTSService
from lib.ui.forms import (
    FORM_FIELDS,
    MODE_FORMS,
    build_request,
    default_voice,
    form_errors,
    form_note,
    style_used,
    voice_choices,
)
from lib.ui.messages import UIMessage, explain, explain_note, scrub_paths
from lib.ui.plots import WINDOWS, hit_rate_plot, latency_plot, window_rate
from lib.ui.views import (
    HistoryItem,
    admin_sentence,
    badge_html,
    details_markdown,
    download_name,
    history_label,
    stats_markdown,
    style_notice,
    tag_choices,
    top_table,
)
from lib.validate import MAX_SEED, check_seed, check_speed

__all__ = ["HISTORY", "Handlers", "error_html"]

_LOGGER = logging.getLogger(__name__)

HISTORY = 5
"""Recent results kept per browser session."""
_REMEMBERED = 512  # failed events whose message waits for its .failure step


def error_html(text: str | list[str]) -> str:
    """An alert box: one message, or a heading and a list of them."""
    if not text:
        return ""
    if isinstance(text, str):
        return f'<div class="ui-error" role="alert">✖ {html.escape(text)}</div>'
    head, *items = text
    lines = "".join(f"<li>{html.escape(item)}</li>" for item in items)
    return f'<div class="ui-error" role="alert">✖ {html.escape(head)}<ul>{lines}</ul></div>'


def _verdict(check: Callable[[], object]) -> dict[str, Any]:
    try:
        check()
    except TTSError as exc:
        return gr.validate(False, str(explain(exc)))  # type: ignore[no-any-return]
    return gr.validate(True, "")  # type: ignore[no-any-return]


class Handlers:
    """The handlers of one UI over one service."""

    def __init__(self, service: TTSService, phrases_path: Path) -> None:
        self.service = service
        self.phrases_path = phrases_path
        self._errors: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def caller(self, request: gr.Request | None, token: str | None = None) -> Caller:
        host = request.client.host if request is not None and request.client else None
        return self.service.access.caller(origin="ui", client_host=host, token=token)

    # -- errors --------------------------------------------------------------------------

    def fail(self, channel: str, request: gr.Request | None, message: UIMessage | str) -> NoReturn:
        """Remember ``message`` for this session's ``channel`` and raise it, unseen, to
        Gradio (the failure step shows it in place)."""
        text = str(message)
        session = getattr(request, "session_hash", None) or ""
        with self._lock:
            self._errors[(session, channel)] = text
            self._errors.move_to_end((session, channel))
            while len(self._errors) > _REMEMBERED:
                self._errors.popitem(last=False)
        raise gr.Error(text, visible=False, print_exception=False)

    def failure_view(self, channel: str) -> Callable[[gr.Request], str]:
        """The ``.failure`` step of a ``channel`` event: its message as an alert box."""

        def show(request: gr.Request) -> str:
            session = getattr(request, "session_hash", None) or ""
            with self._lock:
                text = self._errors.pop((session, channel), "")
            return error_html(text)

        return show

    # -- synthesise ----------------------------------------------------------------------

    def clear_result(self, *form: Any) -> tuple[None, str, str, Any, str]:
        """The first step of a request: the result area shows nothing of the last one,
        and, when the form has problems, all of them (the fields may be out of view)."""
        errors = form_errors(self.service, form[: len(FORM_FIELDS)]) if form else {}
        message = ""
        if errors:
            message = error_html(["请修正以下输入 Please fix:", *(str(m) for m in errors.values())])
        return None, "", "", gr.update(value="", visible=False), message

    def validate(self, *values: Any) -> list[dict[str, Any]]:
        """The Synthesise event's validator: a verdict per input (the form fields, then
        the history state), with the API's rules."""
        errors = form_errors(self.service, values[: len(FORM_FIELDS)])
        verdicts = [gr.validate(name not in errors, str(errors.get(name, ""))) for name in FORM_FIELDS]
        return verdicts + [gr.validate(True, "") for _ in values[len(FORM_FIELDS) :]]

    def synthesise(
        self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str, style: str,
        seed: Any, speed: Any, fmt: str, use_cache: bool, history: list[HistoryItem] | None,
        request: gr.Request, progress: gr.Progress = gr.Progress(),  # noqa: B008 - Gradio injects it by this default
    ) -> tuple[str, str, str, Any, list[HistoryItem]]:  # fmt: skip
        progress(0.1, desc="合成中 Synthesising…")
        try:
            req = build_request(mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache)
            result = self.service.synthesise(req)
            name = download_name(req.voice or "", req.text, req.seed, result.key, fmt)
            data = result.wav if fmt == "wav" else self.service.audio_bytes(result.audio, fmt)
            path = self.service.files.write(name, data)
        except TTSError as exc:
            self.fail("synth", request, explain(exc, paths=[prompt_audio]))
        notice = style_notice(result.info)
        label = history_label(result.cache, req.voice or "", req.text, req.seed)
        item: HistoryItem = {"path": str(path), "label": label}
        kept = [h for h in (history or []) if h.get("path") != item["path"]]
        return (
            str(path), badge_html(result.cache), details_markdown(result, name),
            gr.update(value=notice, visible=bool(notice)), [item, *kept][:HISTORY],
        )  # fmt: skip

    @staticmethod
    def history_view(history: list[HistoryItem] | None) -> list[Any]:
        """The history players: one per recent result (files since trimmed are dropped)."""
        items = [h for h in (history or []) if Path(h.get("path", "")).is_file()]
        updates: list[Any] = []
        for i in range(HISTORY):
            if i < len(items):
                updates.append(gr.update(value=items[i]["path"], label=items[i]["label"], visible=True))
            else:
                updates.append(gr.update(value=None, visible=False))
        return updates

    @staticmethod
    def check_seed(value: Any) -> dict[str, Any]:
        """Validator of the seed field as soon as it is left (the API's rule). One input:
        Gradio expects the verdict itself, not a list of one."""
        return _verdict(lambda: check_seed(value))

    @staticmethod
    def check_speed(value: Any) -> dict[str, Any]:
        return _verdict(lambda: check_speed(value))

    @staticmethod
    def roll_seed() -> int:
        return random.randint(0, MAX_SEED)

    def mode_form(
        self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, style: str
    ) -> tuple[Any, Any, Any, Any, str]:
        """Show the fields ``mode`` uses, hide the others; the steps and notes line."""
        form = MODE_FORMS.get(mode, MODE_FORMS["preset"])
        engine = self.service.engine
        uses_style = style_used(mode, engine.style_modes)
        if form.transcript or (form.prompt_audio and mode != "instruct"):
            # the clone modes take a saved voice, never a preset
            voice = None if voice and self.service.is_preset(voice) else voice
        elif not voice:
            voice = default_voice(engine.presets())
        style_label = "风格指令 Style instruction" + (
            "（必填 required）" if mode == "instruct" else "（可选 optional, e.g. 'slow, calm' / '开心'）"
        )
        return (
            gr.update(visible=form.prompt_audio),
            gr.update(visible=form.transcript),
            gr.update(label=form.voice_label, value=voice),
            gr.update(visible=uses_style, label=style_label),
            self.form_note(mode, prompt_audio, voice, prompt_text, style),
        )

    def form_note(self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, style: str) -> str:
        saved = {v["name"] for v in self.service.list_voices() if v["kind"] == "saved"}
        return form_note(mode, prompt_audio, voice, prompt_text, style, self.service.engine.style_modes, saved)

    # -- voices --------------------------------------------------------------------------

    def voice_updates(self) -> tuple[Any, Any, int]:
        """New choices for the Synthesise tab's voice list (its choice is kept) and the
        delete list (saved voices only: presets cannot be deleted), and a new version
        number for the voice list."""
        voices = self.service.list_voices()
        saved = [str(v["name"]) for v in voices if v["kind"] == "saved"]
        return gr.update(choices=voice_choices(voices)), gr.update(choices=saved, value=None), time.monotonic_ns()

    def save_voice(
        self, name: str, audio: str | None, transcript: str, replace: bool, token: str, request: gr.Request
    ) -> tuple[Any, Any, int, str]:
        try:
            saved = self.service.save_voice(
                name or "", audio, transcript or "", replace=bool(replace), caller=self.caller(request, token)
            )
        except TTSError as exc:
            self.fail("voices", request, explain(exc, paths=[audio]))
        name, seconds = saved["name"], saved["seconds"]
        done = f"✔ 已保存音色「{name}」（{seconds} 秒）。Saved the voice '{name}' ({seconds} s)."
        return (*self.voice_updates(), done)

    @staticmethod
    def ask_delete(name: str | None) -> tuple[Any, str, str]:
        """The confirmation step of a delete: nothing is deleted yet."""
        if not name:
            return (
                gr.update(visible=False),
                "",
                error_html("请先选择要删除的已存音色 Pick a saved voice to delete first."),
            )
        question = f"确定删除音色「{name}」？此操作不能撤销。Delete the voice '{name}'? This cannot be undone."
        return gr.update(visible=True), f'<div class="ui-notice" role="status">{html.escape(question)}</div>', ""

    def delete_voice(self, name: str | None, token: str, request: gr.Request) -> tuple[Any, Any, int, str, Any]:
        try:
            self.service.delete_voice(name or "", caller=self.caller(request, token))
        except TTSError as exc:
            self.fail("voices", request, explain(exc))
        done = f"✔ 已删除音色「{name}」。Deleted the voice '{name}'."
        return (*self.voice_updates(), done, gr.update(visible=False))

    def player(self, name: str) -> Callable[[gr.Request], str]:
        """The handler of one voice's play button."""

        def play(request: gr.Request) -> str:
            return self.play_voice(name, request)

        return play

    def play_voice(self, name: str, request: gr.Request | None = None) -> str:
        """A short sample in voice ``name`` (cached after the first play)."""
        preset = self.service.is_preset(name)
        sample = "你好，欢迎光临。Hello and welcome." if preset else "你好，这是我的声音。This is my voice."
        try:
            return str(self.service.synthesise(TTSRequest(text=sample, voice=name)).path)
        except TTSError as exc:
            self.fail("voices", request, explain(exc))

    # -- the cache tab -------------------------------------------------------------------

    def refresh_cache(self, window: int | None = None, request: gr.Request | None = None) -> tuple[Any, ...]:
        seconds = int(window if window is not None else WINDOWS[0][1])
        snap = self.service.snapshot(top=50, caller=self.caller(request))  # grouped below: fewer rows
        samples = list(self.service.stats.samples)
        now = time.time()
        label = next((name for name, s in WINDOWS if s == seconds), f"{seconds} s")
        rate, lookups = window_rate(samples, seconds, now)
        text = stats_markdown(snap, (label, rate, lookups))
        if "top_requested" not in snap:
            text += "\n\n常用短语仅管理员可见 The most requested phrases are shown to the admin only."
        return (
            text, latency_plot(samples, seconds, now), hit_rate_plot(samples, seconds, now),
            top_table(snap.get("top_requested", [])), top_table(snap.get("top_missed", [])),
        )  # fmt: skip

    def evict_choices(self) -> Any:
        """Model versions present in the cache, with counts; never pre-selected."""
        return gr.update(choices=tag_choices(self.service.dashboard.tags(), self.service.tag), value=None)

    def admin_clear(self, confirmed: bool, token: str, tag: str | None, request: gr.Request) -> tuple[str, bool]:
        return self._admin("clear", confirmed, token, tag, request)

    def admin_evict(self, confirmed: bool, token: str, tag: str | None, request: gr.Request) -> tuple[str, bool]:
        return self._admin("evict", confirmed, token, tag, request)

    def admin_sweep(self, confirmed: bool, token: str, tag: str | None, request: gr.Request) -> tuple[str, bool]:
        return self._admin("sweep", confirmed, token, tag, request)

    def admin_verify(self, confirmed: bool, token: str, tag: str | None, request: gr.Request) -> tuple[str, bool]:
        return self._admin("verify", confirmed, token, tag, request)

    def _admin(
        self, action: str, confirmed: bool, token: str, tag: str | None, request: gr.Request
    ) -> tuple[str, bool]:
        if not confirmed:
            self.fail(
                "admin", request,
                "请先勾选「我已确认」：此操作会影响所有用户的缓存 — tick 'I understand' first: this changes the "
                "cache for every user",
            )  # fmt: skip
        caller = self.caller(request, token)
        service = self.service
        try:
            if action == "clear":
                done = service.clear(caller)
            elif action == "evict":
                done = service.evict(tag or "", caller)
            elif action == "sweep":
                done = service.sweep_expired(caller)
            else:
                done = service.verify(caller)
        except TTSError as exc:
            self.fail("admin", request, explain(exc))
        _LOGGER.warning("admin action %s from the web UI: %s", action, json.dumps(done, ensure_ascii=False))
        return admin_sentence(action, done), False

    def export_top(self, request: gr.Request) -> tuple[str | None, str]:
        try:
            document, notes = export_phrases(self.service, top=50, caller=self.caller(request))
        except TTSError as exc:
            self.fail("export", request, explain(exc))
        skipped = "".join(f"\n- {explain_note(n)}" for n in notes[:20])
        if not document["phrases"]:
            why = "\n\n跳过 Skipped:" + skipped if notes else ""
            return None, (
                "没有可导出的短语：请先在「合成」页合成几条短语（上传的录音需先在「音色」页保存为音色）。"
                "Nothing to export yet: synthesise some phrases first (save an uploaded recording as a voice "
                "in the Voices tab to export its phrases)." + why
            )
        data = (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
        target = self.service.files.write("hot_phrases.json", data)
        n = len(document["phrases"])
        message = f"✔ 已导出 {n} 条短语 Exported {n} phrases."
        if notes:
            message += f"\n\n跳过 {len(notes)} 条 Skipped {len(notes)}:" + skipped
        return str(target), message

    def run_preload(
        self,
        upload: str | None,
        force: bool,
        request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008
    ) -> str:
        path = Path(upload) if upload else self.phrases_path
        paths = [upload] if upload else []
        try:
            requests = expand(load_phrases(path))
        except TTSError as exc:
            self.fail("preload", request, explain(exc, paths=paths))
        progress((0, len(requests)), desc="预加载 Preloading", unit="phrases")

        def step(report: PreloadReport) -> None:
            progress((report.total, len(requests)), desc="预加载 Preloading", unit="phrases")

        try:
            report = preload(self.service, requests, workers=1, force=force, on_done=step, caller=self.caller(request))
        except TTSError as exc:
            self.fail("preload", request, explain(exc, paths=paths))
        head = (
            f"{'✔' if not report.failed else '⚠'} 预加载完成：共 {report.total} 条，生成 {report.generated} 条，"
            f"已缓存 {report.cached} 条，失败 {report.failed} 条。  \n`{report.summary()}`"
        )
        failures = [f"- {entry}: {scrub_paths(msg, paths)}" for entry, msg in report.failures[:20]]
        return "\n".join([head, *failures])
