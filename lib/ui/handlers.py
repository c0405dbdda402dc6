"""The Synthesise and Voices tabs' event handlers: each turns form values into one call
to the service and its answer into component values. Field problems of the Synthesise
form are shown at the fields by the event's validator (:meth:`Handlers.validate`), the
others in place (:mod:`lib.ui.base`). The Cache and Preload tabs: :mod:`lib.ui.cache_handlers`.
"""

from __future__ import annotations

import html
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from lib.audio.activity import prompt_advice, speech_activity
from lib.audio.pcm import wav_bytes
from lib.core.reports import VoiceInfo
from lib.errors import TTSError
from lib.pipeline.results import SynthesisResult
from lib.pipeline.service import TTSService
from lib.request.access import ANYONE
from lib.request.messages import MODE_NAMES, explain
from lib.request.types import ConvertRequest, TTSRequest
from lib.request.validate import MAX_SEED, check_speed
from lib.ui.base import error_html, live_playback_available
from lib.ui.cache_handlers import CacheHandlers
from lib.ui.convert import CONVERT_FIELDS, build_convert_request, check_source, convert_errors
from lib.ui.forms import (
    FORM_FIELDS,
    MODE_FORMS,
    Resolutions,
    SynthesisForm,
    default_voice,
    form_errors,
    form_note,
    form_seed,
    style_used,
    voice_choices,
)
from lib.ui.playback import LiveFeed
from lib.ui.views import (
    HistoryItem,
    badge_html,
    details_markdown,
    download_name,
    history_label,
    shown_cache,
    style_notice,
)

__all__ = [
    "BUTTON_LABELS",
    "HISTORY",
    "LIVE_NOTICE",
    "Handlers",
    "error_html",
    "live_count_html",
    "live_playback_available",
]

HISTORY = 5
"""Recent results kept per browser session."""

_REMEMBERED_COUNTS = 256
"""Sessions whose sentence count is kept (a page closed mid-request never ends its own)."""

RECOMMENDED_SECONDS = (3.0, 10.0)
"""The length of a voice recording the forms ask for (a save outside it says so)."""

#: The Synthesise and Convert buttons (by ``converts``), ready and while a request runs.
BUTTON_LABELS = {False: "合成 Synthesise", True: "变声 Convert"}
BUSY_LABELS = {False: "合成中… Synthesising…", True: "变声中… Converting…"}

#: The result details while a long miss plays live.
LIVE_NOTE = "生成中，边合成边播放 Generating: playing while it is made…"


def live_count_html(made: int, total: int) -> str:
    """How many of a live result's sentences are made ("3/6 句 sentences"), for the line
    over the live player (:meth:`Handlers.live_count`)."""
    return f'<span class="live-count">已合成 Made {min(made, total)}/{total} 句 sentences</span>'


#: Shown instead of the live player when ffmpeg is missing.
LIVE_NOTICE = (
    "结果合成完毕后播放。要让长文本边合成边播放，请安装 ffmpeg（`apt-get install ffmpeg`）并重启。 Results play "
    "when they are complete. To hear long texts while they are made, install ffmpeg and restart: Gradio encodes "
    "the live stream with it."
)


#: The outputs of a request whose mode is gone: result, badge, details, notice, history.
_DISCARDED: tuple[Any, ...] = (gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip())


def _words(req: TTSRequest | ConvertRequest) -> str:
    """What a result says, for its file name and history label (a conversion has no text)."""
    return req.text if isinstance(req, TTSRequest) else MODE_NAMES["convert"]


def _field_note(check: Callable[[], object]) -> Any:
    """The field's info line: its problem (marked for the error colour), or none."""
    try:
        check()
    except TTSError as exc:
        return gr.update(info=f"✖ {explain(exc)}", elem_classes=["field-error"])
    return gr.update(info="", elem_classes=[])  # "": none (None would leave the last one)


class Handlers(CacheHandlers):
    """The handlers of one UI over one service (every tab)."""

    def __init__(self, service: TTSService, phrases_path: Path) -> None:
        super().__init__(service, phrases_path)
        self.resolutions = Resolutions()
        """What the checks of a click resolved, for its handler: one resolution a click."""
        self._made: dict[str, tuple[int, int]] = {}
        """Sentences made of each session's result being made (session -> (made, total))."""
        self._live: set[str] = set()
        """Sessions whose result plays live now: :meth:`live_count` shows their count."""

    # -- synthesise ----------------------------------------------------------------------

    def clear_result(self, *form: Any) -> tuple[None, str, str, Any, str]:
        """The first step of a request: the result area shows nothing of the last one,
        and, when the form has problems, all of them (the fields may be out of view)."""
        errors = form_errors(self.service, SynthesisForm.of(form), self.resolutions) if form else {}
        message = ""
        if errors:
            message = error_html(["请修正以下输入 Please fix:", *(str(m) for m in errors.values())])
        return None, "", "", gr.update(value="", visible=False), message

    def clearer(self, converts: bool, *, live: bool, counted: bool = False) -> Callable[..., tuple[Any, ...]]:
        """The first step of a Synthesise or Convert request: :meth:`clear_result` or
        :meth:`clear_convert`, with ``live`` the live player emptied too, then the button
        shown busy (a click while a request runs would be dropped unseen), and with
        ``counted`` the count's timer started and its line emptied (:meth:`live_count`). A
        form with problems does not run (the validator stops the event, and the steps
        after it): its button stays as it was, and no timer starts."""
        clear = self.clear_convert if converts else self.clear_result

        def first(*form: Any) -> tuple[Any, ...]:
            cleared = clear(*form)
            # A new update each time: Gradio consumes the dictionaries it is given.
            busy = gr.update(value=BUSY_LABELS[converts], interactive=False)
            button = gr.update() if cleared[-1] else busy  # the last one: the form's problems
            # The live player is unmounted (a hidden one is not rendered): the next live
            # result gets a fresh element, which starts at 0, not where the last one stopped.
            gone = gr.update(value=None, visible=False)
            if not live:
                return (*cleared, button)
            if not counted:
                return (*cleared, gone, button)
            ticker = gr.update() if cleared[-1] else gr.Timer(active=True)
            return (*cleared, gone, button, ticker, "")

        return first

    @staticmethod
    def idle(converts: bool) -> Callable[[], Any]:
        """The last step of a request, whatever its end: the button ready again."""
        return lambda: gr.update(value=BUTTON_LABELS[converts], interactive=True)

    def validate(self, *values: Any) -> list[dict[str, Any]]:
        """The Synthesise event's validator: a verdict per input (the form fields, then
        the history state), with the API's rules."""
        errors = form_errors(self.service, SynthesisForm.of(values), self.resolutions)
        verdicts = [gr.validate(name not in errors, str(errors.get(name, ""))) for name in FORM_FIELDS]
        return verdicts + [gr.validate(True, "") for _ in values[len(FORM_FIELDS) :]]

    def synthesise(
        self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str, style: str,
        seed: Any, speed: Any, fmt: str, use_cache: bool, history: list[HistoryItem] | None,
        request: gr.Request, progress: gr.Progress = gr.Progress(),  # noqa: B008 - Gradio injects it by this default
    ) -> tuple[str, str, str, Any, list[HistoryItem]]:  # fmt: skip
        """The whole result at once (``/synthesise``, and the button without ffmpeg)."""
        progress(0.1, desc="合成中 Synthesising…")
        form = self.press_generation(request)
        try:
            fields = SynthesisForm(mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache)
            req = fields.request()
            with self.charged(request):
                result = self.service.synthesise(self.resolutions.take(fields) or req)
            name, path = self._file(req, result, fmt)
        except TTSError as exc:
            self.fail("synth", request, explain(exc, paths=[prompt_audio]))
        if self.form_generation(request) != form:
            return _DISCARDED  # the mode was switched meanwhile: not under another mode's form
        return self._shown(req, result, name, path, history, seed=self._seed(req, result))

    def synthesise_live(
        self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str, style: str,
        seed: Any, speed: Any, fmt: str, use_cache: bool, history: list[HistoryItem] | None, request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008 - Gradio injects it by this default
    ) -> Iterator[tuple[Any, ...]]:  # fmt: skip
        """Like :meth:`synthesise`, but a long miss is played while it is made: the live
        player is shown and fed (:class:`lib.ui.playback.LiveFeed` decides when and
        how); every other result plays from its file. The result player gets the whole
        file at the end either way. Leaving the page does not stop the synthesis: the
        result is still cached. Outputs: live player, then those of :meth:`synthesise`."""
        progress(0.1, desc="合成中 Synthesising…")
        form = self.press_generation(request)
        session = getattr(request, "session_hash", None) or ""
        live = fed = False
        try:
            fields = SynthesisForm(mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache)
            req = fields.request()
            resolved = self.resolutions.take(fields)
            with self.charged(request):  # the stream's thread is charged as this page's caller
                answer = self.service.stream(resolved or req)
            if answer.cache in ("MISS", "BYPASS"):  # being made: HIT and COMPOSED come whole
                total = self.service.segment_count(resolved or req)
                feed = LiveFeed(answer.events(), answer.sample_rate, total=total)

                # "3/6 sentences" on the progress bar until it plays; while it plays, on the
                # line over the live player, which a timer asks for (live_count): an output
                # of this event per sentence (the details) re-rendered the page under the
                # live player, and a phone's player stood still 0.41 s once.
                def made(n: int) -> None:  # sentences, counted by the stream's marks (not its chunks)
                    if feed.total <= 1:
                        return
                    done = min(n, feed.total)
                    with self._lock:
                        self._made[session] = (done, feed.total)
                        while len(self._made) > _REMEMBERED_COUNTS:  # pages closed before their end
                            gone = next(iter(self._made))
                            del self._made[gone]
                            self._live.discard(gone)
                    if not feed.live:
                        progress((done, feed.total), desc=f"合成中 Synthesising: {done}/{feed.total} 句 sentences")

                for pcm in feed.slices(on_made=made):
                    if self.form_generation(request) != form:
                        break  # the mode was switched: stop playing (the result is still made and stored)
                    fed = True
                    yield wav_bytes(pcm, answer.sample_rate), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
                    if not live and feed.hold_sent:  # a fresh player (unmounted since the last request) starts at 0
                        live = True
                        with self._lock:
                            self._live.add(session)
                        badge = badge_html(answer.cache, live=True, making=True)
                        yield gr.update(visible=True), gr.skip(), badge, LIVE_NOTE, gr.skip(), gr.skip()
            result = answer.result()
            name, path = self._file(req, result, fmt)
        except TTSError as exc:
            if fed:  # heard in part: the badge says it failed, and the part is not offered as the result
                failed = badge_html("FAILED", live=True)
                yield gr.update(value=None, visible=False), None, failed, "", gr.skip(), gr.skip()
            self.fail("synth", request, explain(exc, paths=[prompt_audio]))
        finally:
            if not live:  # a live one's count is the end step's (live_count_end)
                with self._lock:
                    self._made.pop(session, None)
        if self.form_generation(request) != form:
            yield gr.skip(), *_DISCARDED
            return
        yield gr.skip(), *self._shown(req, result, name, path, history, seed=self._seed(req, result), live=live)

    def live_count(self, request: gr.Request) -> Any:
        """The timer's tick while a request runs (``#live-count``): how many sentences of
        the session's live result are made, once it plays live; else nothing changes."""
        session = getattr(request, "session_hash", None) or ""
        made = self._made.get(session) if session in self._live else None
        return gr.skip() if made is None else live_count_html(*made)

    def live_count_end(self, succeeded: bool) -> Callable[[gr.Request], tuple[Any, Any]]:
        """The last step of a request that may have played live: the timer stopped and, if
        it played live, the count's line final (every sentence made), or empty after a
        failure; else the line untouched (no update of the page under a result playing)."""

        def end(request: gr.Request) -> tuple[Any, Any]:
            session = getattr(request, "session_hash", None) or ""
            with self._lock:
                made = self._made.pop(session, None)
                live = session in self._live
                self._live.discard(session)
            if not live:  # nothing was counted on the page: the line is left as the press left it
                return gr.Timer(active=False), gr.skip()
            return gr.Timer(active=False), live_count_html(*made) if succeeded and made is not None else ""

        return end

    # -- convert (speech to speech) -------------------------------------------------------

    def clear_convert(self, *form: Any) -> tuple[None, str, str, Any, str]:
        """:meth:`clear_result` for the Convert event: its form's problems, all listed."""
        errors = convert_errors(self.service, form[: len(CONVERT_FIELDS)], self.resolutions) if form else {}
        message = error_html(["请修正以下输入 Please fix:", *(str(m) for m in errors.values())]) if errors else ""
        return None, "", "", gr.update(value="", visible=False), message

    def validate_convert(self, *values: Any) -> list[dict[str, Any]]:
        """The Convert event's validator: a verdict per input (the form, then the history)."""
        errors = convert_errors(self.service, values[: len(CONVERT_FIELDS)], self.resolutions)
        verdicts = [gr.validate(name not in errors, str(errors.get(name, ""))) for name in CONVERT_FIELDS]
        return verdicts + [gr.validate(True, "") for _ in values[len(CONVERT_FIELDS) :]]

    def convert(
        self, source: str | None, prompt_audio: str | None, voice: str | None, seed: Any, speed: Any, fmt: str,
        use_cache: bool, history: list[HistoryItem] | None, request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008 - Gradio injects it by this default
    ) -> tuple[str, str, str, Any, list[HistoryItem]]:  # fmt: skip
        """The source recording's words in the target voice (``/convert``): through the
        same cache and single flight as a synthesis; the same outputs."""
        progress(0.1, desc="变声中 Converting…")
        form = self.press_generation(request)
        try:
            fields = (source, prompt_audio, voice, seed, speed, fmt, use_cache)
            req = build_convert_request(*fields)
            resolved = self.resolutions.take(fields)
            if resolved is None:
                check_source(self.service, req.source_audio)
            with self.charged(request):
                result = self.service.convert(resolved or req)
            name, path = self._file(req, result, fmt)
        except TTSError as exc:
            self.fail("synth", request, explain(exc, paths=[source, prompt_audio]))
        if self.form_generation(request) != form:
            return _DISCARDED  # the mode was switched meanwhile: it would land under another form
        return self._shown(req, result, name, path, history, seed=self._seed(req, result))

    def _seed(self, req: TTSRequest | ConvertRequest, result: SynthesisResult) -> int:
        """The seed that made ``result``: the approved take's own when the answer is the
        phrase's approved take (a request that names no seed), else the request's."""
        if result.take == "approved":
            approval = self.service.takes.book.by_key(result.key)
            if approval is not None:
                return approval.seed
        return req.seed or 0

    def _file(self, req: TTSRequest | ConvertRequest, result: SynthesisResult, fmt: str) -> tuple[str, Path]:
        """The result as a private file named by what it is (voice, text, seed)."""
        style = req.style if isinstance(req, TTSRequest) else ""
        name = download_name(req.voice or "", _words(req), self._seed(req, result), result.key, fmt, style)
        if fmt == "wav":
            data = result.wav
        elif result.cache == "COMPOSED":
            # Not the entry stored under this key (a refined one may be): never keep its transcode.
            data = result.audio.encoded(fmt)
        else:
            data = self.service.cache.audio_bytes(result.audio, fmt)
        return name, self.service.files.write(name, data)

    @staticmethod
    def _shown(
        req: TTSRequest | ConvertRequest, result: SynthesisResult, name: str, path: Path,
        history: list[HistoryItem] | None, *, seed: int, live: bool = False,
    ) -> tuple[str, str, str, Any, list[HistoryItem]]:  # fmt: skip
        """Result file, badge, details, style notice, and the history with this result
        first. ``live``: the result was heard in the live player (the page script then
        does not play the file again)."""
        notice = style_notice(result.info)
        item: HistoryItem = {
            "path": str(path),
            "label": history_label(shown_cache(result), req.voice or "", _words(req), seed),
        }
        kept = [h for h in (history or []) if h.get("path") != item["path"]]
        approved = result.take == "approved"
        # For the play queue: a result stored under its key is queued by /api/audio/<key>.wav
        # (immutable); another (composed, bypass) by its file (lib.ui.queue).
        queued = {
            "key": result.key, "stored": str(int(result.cache in ("HIT", "MISS"))), "text": _words(req),
            "voice": req.voice or "",
        }  # fmt: skip
        badge = badge_html(shown_cache(result), live=live, info=result.info, approved=approved, queued=queued)
        return (
            str(path), badge,
            details_markdown(result, name),
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
    def seed_note(value: Any) -> Any:
        """The seed field's own line as it is typed: the API's rule, or nothing. Shown
        as the field's info, which only this event changes: Gradio's messages at a field
        are wiped by whichever event finishes next (a mode switch, another field's
        check), and the seed's message vanished when another field erred."""
        return _field_note(lambda: form_seed(value))

    @staticmethod
    def speed_note(value: Any) -> Any:
        return _field_note(lambda: check_speed(value))

    @staticmethod
    def roll_seed() -> int:
        return random.randint(0, MAX_SEED)

    def mode_form(
        self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, style: str
    ) -> tuple[Any, ...]:
        """Show the fields ``mode`` uses, hide the others; the steps and notes line. In
        convert mode the source recording and the Convert button replace the text and
        the Synthesise button, and the live player (a conversion is not played live) is
        hidden. Updates of: prompt audio, transcript, voice, style, steps, source, text,
        Synthesise button, Convert button, live player (or its notice)."""
        form = MODE_FORMS.get(mode, MODE_FORMS["preset"])
        engine = self.service.engine
        uses_style = style_used(mode, engine.style_modes)
        chosen = voice
        if form.transcript or (form.prompt_audio and mode not in ("instruct", "convert")):
            # the clone modes take a saved voice, never a preset
            voice = None if voice and self.service.voices.is_preset(voice) else voice
        elif not voice:
            voice = default_voice(engine.presets())
        # The voice's value is sent only when the mode changes it: an example sets the mode
        # and the voice at once, and this event may have read the voice before the example
        # did (it would put the last voice back over the example's).
        voice_update = (
            gr.update(label=form.voice_label, value=voice) if voice != chosen else gr.update(label=form.voice_label)
        )
        style_label = "风格指令 Style instruction" + (
            "（必填 required）" if mode == "instruct" else "（可选 optional, e.g. 'slow, calm' / '开心'）"
        )
        return (
            gr.update(visible=form.prompt_audio, label=form.prompt_label),
            gr.update(visible=form.transcript),
            voice_update,
            gr.update(visible=uses_style and not form.source, label=style_label),
            self.form_note(mode, prompt_audio, voice, prompt_text, style),
            gr.update(visible=form.source),
            gr.update(visible=not form.source),
            gr.update(visible=not form.source),
            gr.update(visible=form.source),
            # The live player only shows while a result plays live (and a mode change
            # discards that result); without ffmpeg, the notice in its place.
            gr.update(visible=False) if self.live_player else gr.update(visible=not form.source),
        )

    def mode_switched(self, mode: str, request: gr.Request) -> tuple[Any, ...]:
        """The operator switched mode: the result area is emptied, a result still being
        made will be discarded when it comes (it is still cached), and both buttons are
        ready. Updates of: result, badge, details, notice, message, live player,
        Synthesise, Convert."""
        self.switch_form(mode, request)
        return (
            None, "", "", gr.update(value="", visible=False), "",
            gr.update(value=None, visible=False) if self.live_player else gr.update(),
            self.idle(False)(), self.idle(True)(),
        )  # fmt: skip

    def result_refused(self) -> tuple[Any, ...]:
        """A file that is not audio was chosen for a recording field (the page script
        refused it and says so in the result's message box): the last result goes, so
        that it is not left beside the error. Updates of: result, badge, details, notice,
        live player (the message box keeps the page script's error)."""
        live = gr.update(value=None, visible=False) if self.live_player else gr.update()
        return None, "", "", gr.update(value="", visible=False), live

    @staticmethod
    def clear_fields(*fields: Any) -> list[dict[str, Any]]:
        """After a mode switch: no message at the fields (they named the form left
        behind; the seed and speed keep their own lines, :meth:`seed_note`)."""
        return [gr.validate(True, "") for _ in fields]

    def form_note(self, mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, style: str) -> str:
        """The steps line; with an uploaded recording the mode uses, a warning when it is
        shorter than asked or mostly silence (:func:`lib.audio.activity.prompt_advice`)."""
        saved = {v["name"] for v in self.service.voices.list(caller=ANYONE) if v["kind"] == "saved"}
        note = form_note(mode, prompt_audio, voice, prompt_text, style, self.service.engine.style_modes, saved)
        form = MODE_FORMS.get(mode)
        advice = self.recording_advice(prompt_audio) if form is not None and form.prompt_audio else ""
        return f"{note}  \n{advice}" if advice else note

    def recording_advice(self, path: str | None) -> str:
        """:func:`lib.audio.activity.prompt_advice` for an uploaded recording; "" when there
        is none or it cannot be decoded (the form's check says why when it is used)."""
        if not path:
            return ""
        try:  # decoded without the prompt checks: one under prompt.min_seconds is warned here too
            prompt = self.service.voices.decoder.decode(path, remember=False)
        except TTSError:
            return ""
        return prompt_advice(speech_activity(prompt.pcm))

    # -- voices --------------------------------------------------------------------------

    def voice_updates(self) -> tuple[Any, Any, int]:
        """New choices for the Synthesise tab's voice list (its choice is kept) and the
        delete list (saved voices only: presets cannot be deleted), and a new version
        number for the voice list."""
        voices = self.service.voices.list(caller=ANYONE)
        saved = [str(v["name"]) for v in voices if v["kind"] == "saved"]
        return gr.update(choices=voice_choices(voices)), gr.update(choices=saved, value=None), time.monotonic_ns()

    def save_voice(
        self, name: str, audio: str | None, transcript: str, replace: bool, token: str, request: gr.Request
    ) -> tuple[Any, Any, int, str]:
        try:
            saved = self.service.voices.save(
                name or "", audio, transcript or "", replace=bool(replace), caller=self.caller(request, token)
            )
        except TTSError as exc:
            self.fail("voices", request, explain(exc, paths=[audio]))
        name, seconds = saved["name"], saved["seconds"]
        done = f"✔ 已保存音色「{name}」（{seconds} 秒）。Saved the voice '{name}' ({seconds} s)."
        advice = self.recording_advice(audio)
        if advice:  # too short, or mostly silence: saved as it is, and why it may clone badly
            done += " " + advice
        elif not RECOMMENDED_SECONDS[0] <= float(seconds) <= RECOMMENDED_SECONDS[1]:
            low, high = RECOMMENDED_SECONDS
            done += (
                f" ⚠ 录音长 {seconds} 秒，不在建议的 {low:g}–{high:g} 秒内：已按原样保存；一段 {low:g}–{high:g} 秒、"
                f"只有一个人说话的录音效果最好。 The recording is {seconds} s, outside the {low:g}–{high:g} s asked "
                f"for: it is saved as it is; {low:g}–{high:g} s of one person speaking clone best."
            )
        return (*self.voice_updates(), done)

    def ask_delete(self, name: str | None) -> tuple[Any, str, str]:
        """The confirmation step of a delete: nothing is deleted yet. A name that cannot
        be deleted (none, a preset, no such saved voice) is refused here, before any
        question. Updates of: the confirmation box, its question, the message."""
        name = (name or "").strip()
        hidden = gr.update(visible=False)
        if not name:
            return hidden, "", error_html("请先选择要删除的已存音色 Pick a saved voice to delete first.")
        saved = {str(v["name"]) for v in self.service.voices.list(caller=ANYONE) if v["kind"] == "saved"}
        if self.service.voices.is_preset(name):
            why = f"「{name}」是预置音色，不能删除 — '{name}' is a preset voice; presets cannot be deleted."
            return hidden, "", error_html(why)
        if name not in saved:
            why = f"没有名为「{name}」的已存音色 — no saved voice named '{name}'; pick one from the list."
            return hidden, "", error_html(why)
        question = f"确定删除音色「{name}」？此操作不能撤销。Delete the voice '{name}'? This cannot be undone."
        return gr.update(visible=True), f'<div class="ui-notice" role="status">{html.escape(question)}</div>', ""

    def voice_kept(self, mode: str, voice: str | None) -> Any:
        """After a delete: the Synthesise tab's voice, unless it was the voice deleted;
        then the mode's default (the first preset where presets are taken, else none)."""
        if not voice or voice in {str(v["name"]) for v in self.service.voices.list(caller=ANYONE)}:
            return gr.update()
        form = MODE_FORMS.get(mode, MODE_FORMS["preset"])
        clones = form.transcript or (form.prompt_audio and mode not in ("instruct", "convert"))
        return gr.update(value=None if clones else default_voice(self.service.engine.presets()))

    def delete_voice(self, name: str | None, token: str, request: gr.Request) -> tuple[Any, Any, int, str, Any]:
        try:
            self.service.voices.delete(name or "", caller=self.caller(request, token))
        except TTSError as exc:
            self.fail("voices", request, explain(exc))
        done = f"✔ 已删除音色「{name}」。Deleted the voice '{name}'."
        return (*self.voice_updates(), done, gr.update(visible=False))

    def voices_for(self, token: str | None, request: gr.Request | None) -> list[VoiceInfo]:
        """Every voice; transcripts (users' texts) only for the admin."""
        return self.service.voices.list(caller=self.caller(request, token))

    def player(self, name: str) -> Callable[[gr.Request], str]:
        """The handler of one voice's play button."""

        def play(request: gr.Request) -> str:
            return self.play_voice(name, request)

        return play

    def play_voice(self, name: str, request: gr.Request | None = None) -> str:
        """A short sample in voice ``name`` (cached after the first play)."""
        preset = self.service.voices.is_preset(name)
        sample = "你好，欢迎光临。Hello and welcome." if preset else "你好，这是我的声音。This is my voice."
        try:
            return str(self.service.synthesise(TTSRequest(text=sample, voice=name)).path)
        except TTSError as exc:
            self.fail("voices", request, explain(exc))
