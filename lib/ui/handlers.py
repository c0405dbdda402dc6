"""The web UI's event handlers: each turns form values into one call to the service and
its answer into component values. Errors become ``gr.Error`` here, once.

Who the caller is (admin or not) is decided by the service's access policy from the
client's address and the admin token typed in the form (:mod:`lib.access`).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from lib.access import Caller
from lib.audio import encode, wav_bytes
from lib.errors import TTSError, ValidationError
from lib.export import export_phrases
from lib.phrases import PhraseRules, expand, load_phrases
from lib.preload import PreloadReport, preload
from lib.request import TTSRequest
from lib.results import SynthesisResult
from lib.service import TTSService
from lib.templates import load_templates
from lib.textnorm import cut_fields
from lib.ui.views import badge_html, hit_rate_frame, latency_frame, stats_markdown, top_frame
from lib.validate import MAX_SEED

__all__ = ["LIVE_NOTICE", "MODE_CHOICES", "Handlers", "build_request", "live_playback_available"]

#: Shown instead of the live player when ffmpeg is missing.
LIVE_NOTICE = (
    "Results play when they are complete. To hear them while they are made (边合成边播放), "
    "install ffmpeg (`apt-get install ffmpeg`) and restart: Gradio encodes the live stream with it."
)


def live_playback_available() -> bool:
    """Gradio's streaming audio output encodes with the ffmpeg program."""
    return shutil.which("ffmpeg") is not None

_LOGGER = logging.getLogger(__name__)

#: (label, value): handlers receive the value, never the label text.
MODE_CHOICES = [
    ("零样本克隆 Zero-shot clone (prompt audio + its transcript)", "zero_shot"),
    ("跨语种克隆 Cross-lingual clone (prompt audio, no transcript)", "cross_lingual"),
    ("指令控制 Instruct (voice + style instruction)", "instruct"),
    ("预置/已存音色 Preset or saved voice", "preset"),
]


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


class Handlers:
    """The handlers of one UI over one service."""

    def __init__(self, service: TTSService, phrases_path: Path) -> None:
        self.service = service
        self.phrases_path = phrases_path

    def caller(self, request: gr.Request | None, token: str | None = None) -> Caller:
        host = request.client.host if request is not None and request.client else None
        return self.service.access.caller(origin="ui", client_host=host, token=token)

    # -- synthesise ----------------------------------------------------------------------

    def synthesise(
        self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str, style: str,
        seed: float | None, speed: float, fmt: str, use_cache: bool,
        progress: gr.Progress = gr.Progress(),  # noqa: B008 - Gradio injects it by this default
    ) -> tuple[str, str, str]:  # fmt: skip
        progress(0.1, desc="Synthesising 合成中…")
        try:
            request = build_request(mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache)
            result = self.service.synthesise(request)
            path = self._file(result, fmt)
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        return path, badge_html(result.cache), self._details(result)

    def synthesise_live(
        self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str, style: str,
        seed: float | None, speed: float, fmt: str, use_cache: bool,
    ) -> Iterator[tuple[Any, Any, str, str]]:  # fmt: skip
        """Like :meth:`synthesise`, but the live player gets each sentence as soon as it
        exists; the result player gets the whole file at the end. Leaving the page does
        not stop the synthesis: the result is still cached."""
        try:
            request = build_request(mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache)
            answer = self.service.stream(request)
            badge = badge_html(answer.cache)
            for pcm in answer.chunks:
                yield wav_bytes(pcm, answer.sample_rate), gr.skip(), badge, "Generating 生成中…"
            result = answer.result()
            path = self._file(result, fmt)
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        yield gr.skip(), path, badge_html(result.cache), self._details(result)

    def _file(self, result: SynthesisResult, fmt: str) -> str:
        if fmt == "wav":
            return str(result.path)
        if result.cache == "COMPOSED":
            # Not the entry stored under this key (a refined one may be): never keep its transcode.
            data = encode(result.audio.pcm, result.sample_rate, fmt)
        else:
            data = self.service.audio_bytes(result.audio, fmt)
        return str(self.service.files.write(f"{result.key}.{fmt}", data))

    @staticmethod
    def _details(result: SynthesisResult) -> str:
        t = result.timings
        details = (
            f"**Key 键**: `{result.key}`  \n**Time 用时**: {t.get('total', 0):.1f} ms"
            + (f" (engine {t['engine']:.1f} ms)" if "engine" in t else "")
            + f"  \n**Audio 音频**: {result.duration:.2f} s at {result.sample_rate} Hz"
        )
        notes = {k: v for k, v in result.info.items() if v not in ([], "", None)}
        if notes:
            details += f"  \n**Notes 说明**: `{json.dumps(notes, ensure_ascii=False)}`"
        return details

    @staticmethod
    def roll_seed() -> int:
        return random.randint(0, MAX_SEED)

    # -- voices --------------------------------------------------------------------------

    def voice_names(self) -> list[str]:
        return [v["name"] for v in self.service.list_voices()]

    def voices_table(self, caller: Caller | None = None) -> pd.DataFrame:
        """The voice list; transcripts only for the admin (they are users' texts)."""
        voices = self.service.list_voices(caller or self.caller(None))
        rows = [(v["name"], v["kind"], v.get("seconds", ""), v.get("prompt_text", "")) for v in voices]
        return pd.DataFrame(rows, columns=["name", "kind", "seconds", "prompt_text"])

    def voice_updates(self, caller: Caller | None = None) -> tuple[Any, Any, Any]:
        names = self.voice_names()
        return gr.update(choices=names), gr.update(choices=names, value=None), self.voices_table(caller)

    def save_voice(
        self, name: str, prompt_audio: str | None, prompt_text: str, replace: bool, token: str, request: gr.Request
    ) -> tuple[Any, Any, Any, str]:
        """Save under a new name; replacing a saved voice needs the admin (token)."""
        caller = self.caller(request, token)
        try:
            saved = self.service.save_voice(
                name or "", prompt_audio, prompt_text or "", replace=bool(replace), caller=caller
            )
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        return (*self.voice_updates(caller), f"Saved voice **{saved['name']}** ({saved['seconds']} s) 已保存")

    def delete_voice(self, name: str | None, token: str, request: gr.Request) -> tuple[Any, Any, Any, str]:
        caller = self.caller(request, token)
        try:
            self.service.delete_voice(name or "", caller=caller)
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        return (*self.voice_updates(caller), f"Deleted voice **{name}** 已删除")

    def play_voice(self, name: str | None) -> str:
        if not name:
            raise gr.Error("pick a voice to play")
        preset = self.service.is_preset(name)
        sample = "你好，欢迎光临。Hello and welcome." if preset else "你好，这是我的声音。This is my voice."
        try:
            return str(self.service.synthesise(TTSRequest(text=sample, voice=name)).path)
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc

    # -- the cache tab -------------------------------------------------------------------

    def refresh_cache(
        self, token: str | None = None, request: gr.Request | None = None
    ) -> tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """The Cache tab; the phrase tables (users' texts) for the admin only."""
        snap = self.service.snapshot(top=20, caller=self.caller(request, token))
        samples = list(self.service.stats.samples)
        return (
            stats_markdown(snap), latency_frame(samples), hit_rate_frame(samples),
            top_frame(snap.get("top_requested", [])), top_frame(snap.get("top_missed", [])),
        )  # fmt: skip

    def admin_clear(self, confirmed: bool, token: str, tag: str, request: gr.Request) -> tuple[str, bool]:
        return self._admin("clear", confirmed, token, tag, request)

    def admin_evict(self, confirmed: bool, token: str, tag: str, request: gr.Request) -> tuple[str, bool]:
        return self._admin("evict", confirmed, token, tag, request)

    def admin_sweep(self, confirmed: bool, token: str, tag: str, request: gr.Request) -> tuple[str, bool]:
        return self._admin("sweep", confirmed, token, tag, request)

    def admin_verify(self, confirmed: bool, token: str, tag: str, request: gr.Request) -> tuple[str, bool]:
        return self._admin("verify", confirmed, token, tag, request)

    def _admin(self, action: str, confirmed: bool, token: str, tag: str, request: gr.Request) -> tuple[str, bool]:
        if not confirmed:
            raise gr.Error("tick 'I understand 我已确认' first: this changes the cache for every user")
        caller = self.caller(request, token)
        service = self.service
        try:
            if action == "clear":
                done = service.clear(caller)
            elif action == "evict":
                done = service.evict((tag or "").strip(), caller)
            elif action == "sweep":
                done = service.sweep_expired(caller)
            else:
                done = service.verify(caller)
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        _LOGGER.warning("admin action %s from the web UI: %s", action, cut_fields(done))
        return f"**{action}**: `{json.dumps(done, ensure_ascii=False)}`", False

    def export_top(self, token: str, request: gr.Request) -> tuple[str, str]:
        try:
            document, notes = export_phrases(self.service, top=50, caller=self.caller(request, token))
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        if not document["phrases"]:
            raise gr.Error("nothing to export yet: no phrase in the statistics can be rebuilt from its voice")
        data = (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
        target = self.service.files.write("hot_phrases.json", data)
        message = f"Exported {len(document['phrases'])} phrases 已导出."
        if notes:
            message += " Skipped:\n" + "\n".join(f"- {n}" for n in notes[:20])
        return str(target), message

    def run_preload(
        self, upload: str | None, force: bool, token: str, request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008
    ) -> str:  # fmt: skip
        path = Path(upload) if upload else self.phrases_path
        # An uploaded list lives in Gradio's upload area, among other users' uploads: it
        # may use recordings in preload.prompt_dir only, never its own folder.
        rules = PhraseRules.from_config(self.service.config.preload, own_folder=not upload)
        try:
            requests = expand(load_phrases(path, rules))
            templates = load_templates(path, rules)
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        total = len(requests) + sum(len(self.service.templates.pieces(t)) for t in templates)
        progress((0, total), desc="Preloading 预加载", unit="phrases")

        def step(report: PreloadReport) -> None:
            progress((report.total, total), desc="Preloading 预加载", unit="phrases")

        try:
            report = preload(
                self.service, requests, workers=1, force=force, on_done=step, caller=self.caller(request, token),
                templates=templates,
            )  # fmt: skip
        except TTSError as exc:
            raise gr.Error(str(exc)) from exc
        # From now on this service composes answers from the list's templates too.
        self.service.templates.add(templates)
        lines = [f"`{report.summary()}`"] + [f"- {entry}: {message}" for entry, message in report.failures[:20]]
        if templates:
            lines.append(f"{len(templates)} template(s) active 模板已启用")
        return "\n".join(lines)
