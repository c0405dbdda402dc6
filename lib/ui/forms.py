"""The Synthesise form: which fields each mode uses, its steps line and notes, the
one-click examples, and the form -> :class:`TTSRequest` mapping with its validation.

Validation runs the service's own rules (:mod:`lib.request.validate` and the resolver), so the
form refuses exactly what the HTTP API refuses, with the message at the field.
Adding a mode means one more :class:`ModeForm` entry; the convert mode (speech to
speech) has its own request and checks in :mod:`lib.ui.convert`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lib.config import AppConfig
from lib.core.logtext import cut_text
from lib.errors import ValidationError
from lib.request.messages import MODE_NAMES, FieldErrors, UIMessage
from lib.request.phrases import PhraseRequest
from lib.request.types import CONVERT, Resolved, TTSRequest
from lib.request.validate import MAX_SEED, check_seed, check_speed, normalise_fields

__all__ = [
    "FORM_FIELDS",
    "MODE_FORMS",
    "ModeForm",
    "Resolutions",
    "SynthesisForm",
    "build_request",
    "default_voice",
    "examples",
    "form_errors",
    "form_note",
    "mode_choices",
    "sample_text",
    "style_used",
    "voice_choices",
]

#: The inputs of the Synthesise event, in order (the validator answers one per input).
FORM_FIELDS = ("mode", "prompt_audio", "voice", "prompt_text", "text", "style", "seed", "speed", "format", "use_cache")


@dataclass(frozen=True)
class SynthesisForm:
    """The Synthesise form as its event gives it (:data:`FORM_FIELDS`, in order): the one
    record of it every handler, check and panel reads, made once per call by :meth:`of`."""

    mode: str
    prompt_audio: str | None
    voice: str | None
    prompt_text: str
    text: str
    style: str
    seed: Any
    """As typed: a text box (empty: no seed), checked by :func:`form_seed`."""
    speed: Any
    format: str
    use_cache: bool

    @classmethod
    def of(cls, values: Sequence[Any]) -> SynthesisForm:
        """The form from the event's values (the first :data:`FORM_FIELDS`; more are the
        event's own, e.g. the history)."""
        return cls(*values[: len(FORM_FIELDS)])

    def request(self) -> TTSRequest:
        """Turn the form into a request. Which voice fields count depends on the mode: a
        preset or saved voice in ``preset`` mode; otherwise the prompt audio, or a voice
        from the list when no audio is given."""
        mode, prompt_audio, prompt_text = self.mode, self.prompt_audio, self.prompt_text
        if mode not in MODE_FORMS:
            raise ValidationError(f"mode: {mode!r} is not a mode; pick one of the modes above")
        if mode == CONVERT:
            raise ValidationError("mode: convert mode converts a recording; use the Convert button (API: /convert)")
        voice = (self.voice or "").strip() or None
        if mode == "preset":
            if voice is None:
                raise ValidationError("voice: pick a preset or saved voice from the list")
            prompt_audio = None
        elif prompt_audio:
            voice = None
        elif voice is None:
            raise ValidationError("prompt audio: upload or record a prompt, or pick a saved voice")
        return TTSRequest(
            text=self.text or "", prompt_audio=prompt_audio, voice=voice,
            prompt_text=(prompt_text or "") if mode == "zero_shot" else "",
            style=self.style or "", seed=form_seed(self.seed), speed=check_speed(self.speed), mode=mode,
            format=self.format, use_cache=bool(self.use_cache),
        )  # fmt: skip


@dataclass(frozen=True)
class ModeForm:
    """What one mode shows."""

    value: str
    prompt_audio: bool
    """Whether the prompt upload/recording is shown."""
    transcript: bool
    """Whether the prompt transcript is shown (and needed)."""
    voice_label: str
    steps: str
    source: bool = False
    """Whether the source recording (convert mode) is shown; the text, transcript and
    style are not, since a conversion speaks the source's words."""
    prompt_label: str = "参考音频 Prompt audio (3–10 s of one person speaking)"


MODE_FORMS: dict[str, ModeForm] = {
    form.value: form
    for form in (
        ModeForm(
            "preset", False, False, "音色 Voice",
            "① 选择音色 Pick a voice → ② 输入文本 Type the text → ③ 合成 Synthesise (Ctrl+Enter)",
        ),
        ModeForm(
            "zero_shot", True, True, "或选择已存音色 Or a saved voice (instead of a recording)",
            "① 上传或录制 3–10 秒参考音频，或选择已存音色 Upload or record 3–10 s of the voice, or pick a saved "
            "one → ② 逐字填写参考音频文本 Type exactly what the recording says → ③ 输入文本 Type the text → "
            "④ 合成 Synthesise (Ctrl+Enter)",
        ),
        ModeForm(
            "cross_lingual", True, False, "或选择已存音色 Or a saved voice (instead of a recording)",
            "① 上传或录制参考音频，或选择已存音色 Upload or record the voice, or pick a saved one → "
            "② 输入任意语言的文本 Type text in any language → ③ 合成 Synthesise (Ctrl+Enter)",
        ),
        ModeForm(
            "instruct", True, False, "音色 Voice (or upload a recording)",
            "① 选择音色或上传参考音频 Pick a voice or upload a recording → ② 填写风格指令，如「慢一点，开心」"
            " Give a style such as 'slow, happy' → ③ 输入文本 Type the text → ④ 合成 Synthesise (Ctrl+Enter)",
        ),
        ModeForm(
            "convert", True, False, "或选择目标音色 Or pick the target voice (preset or saved)",
            "① 上传或录制要变声的源录音 Upload or record the recording to convert → ② 上传或录制目标音色，或选择"
            "预置/已存音色 Upload or record the target voice, or pick a preset or saved one → ③ 变声 Convert "
            "(Ctrl+Enter)",
            source=True, prompt_label="目标音色录音 Target voice recording (3–10 s of one person speaking)",
        ),
    )
}  # fmt: skip

_SAMPLES = {
    "zh": ("请A023号顾客到3号窗口办理业务。", "列车即将进站，请站在黄色安全线以内。", "欢迎光临，请随便看看。"),
    "en": ("The train is now arriving. Please stand behind the yellow line.", "Welcome! Let us know if you need help."),
    "yue": ("多谢晒，欢迎下次再嚟。",),
}


class Resolving(Protocol):
    """What validation needs of the service."""

    @property
    def config(self) -> AppConfig: ...

    def resolve(self, request: TTSRequest) -> Resolved: ...


def mode_choices(engine_modes: Collection[str], converts: bool = False) -> list[tuple[str, str]]:
    """(label, value) of the modes this engine serves, in the form's order; the convert
    mode only when the engine can convert (:func:`lib.engines.base.can_convert`)."""
    return [(MODE_NAMES[m], m) for m in MODE_FORMS if m in engine_modes or (m == CONVERT and converts)]


def voice_choices(voices: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(label, name) of every voice, marked preset or saved."""
    kinds = {"preset": "预置 preset", "saved": "已存 saved"}
    return [(f"{v['name']}（{kinds.get(str(v['kind']), v['kind'])}）", str(v["name"])) for v in voices]


def language_of(voice: str) -> str:
    name = voice.lower()
    if name.startswith("en") or "英" in name:
        return "en"
    if name.startswith("yue") or "粤" in name:
        return "yue"
    return "zh"


def sample_text(voice: str | None, index: int = 0) -> str:
    samples = _SAMPLES[language_of(voice or "")]
    return samples[index % len(samples)]


def default_voice(presets: Sequence[str]) -> str | None:
    """The first Mandarin preset (the shipped phrases are mostly Chinese), else the first."""
    for name in presets:
        if language_of(name) == "zh":
            return name
    return presets[0] if presets else None


def style_used(mode: str, style_modes: Collection[str]) -> bool:
    return mode == "instruct" or mode in style_modes


def examples(
    presets: Sequence[str], modes: Collection[str], phrases: Sequence[PhraseRequest] = ()
) -> tuple[list[list[Any]], list[str]]:  # fmt: skip
    """One-click examples on the engine's preset voices: rows of (mode, voice, text,
    style) and their labels. Each is a phrase of ``phrases`` (the shipped list, which
    ``./run.sh`` preloads), asked for exactly as the list asks for it, so that a click
    is a hit: per preset voice the first phrase in preset mode with the form's default
    seed and speed, then the list's instruct phrases. Uploaded recordings cannot be
    examples (the app ships none); saved voices are played from the Voices tab. Without
    a list, sample texts (not preloaded)."""
    order = {"zh": 0, "en": 1, "yue": 2}
    plain = [p for p in phrases if p.prompt_audio is None and p.seed in (None, 0) and p.speed == 1.0]
    # The voices the list speaks first (else the named presets before the base's own
    # voices, ``kokoro-<voice>``), Chinese first.
    listed_voices = {p.voice for p in plain}
    presets = sorted(
        presets, key=lambda p: (p not in listed_voices if phrases else p.startswith("kokoro-"), order[language_of(p)])
    )[:5]
    rows: list[list[Any]] = []
    if "preset" in modes:
        seen: dict[str, int] = {}
        for voice in presets:
            listed = next((p for p in plain if p.voice == voice and p.mode in ("", "preset") and not p.style), None)
            if listed is not None:
                rows.append(["preset", voice, listed.text, ""])
            elif not phrases:
                lang = language_of(voice)
                rows.append(["preset", voice, sample_text(voice, seen.get(lang, 0)), ""])
                seen[lang] = seen.get(lang, 0) + 1
    if "instruct" in modes and presets:
        rows += [["instruct", p.voice, p.text, p.style] for p in plain if p.mode == "instruct" and p.voice in presets]
        if not phrases:
            zh = default_voice(presets)
            en = next((p for p in presets if language_of(p) == "en"), None)
            rows.append(["instruct", zh, "欢迎光临！", "开心"])
            if en is not None:
                rows.append(["instruct", en, "Please mind the gap.", "slow, calm"])
    labels = [
        f"{voice} · {style + ' · ' if style else ''}{text if len(text) <= 16 else text[:15] + '…'}"
        for _, voice, text, style in rows
    ]
    return rows, labels


def form_seed(value: Any) -> int | None:
    """The seed field: empty (its default) names no seed -- the phrase's approved take
    when it has one, else seed 0 under the same key (lib.takes); else the API's rule."""
    if value is None:
        return None
    if isinstance(value, str):  # the field is a text box (Gradio's number box cannot be empty)
        typed = value.strip()
        if not typed:
            return None
        try:
            value = int(typed)
        except ValueError:
            try:
                value = float(typed)  # 1.5 is refused by check_seed with its own words, 7.0 is 7
            except ValueError:
                raise ValidationError(
                    f"seed: must be a whole number from 0 to {MAX_SEED}, got {cut_text(repr(typed))}"
                ) from None
    return check_seed(value)


def build_request(
    mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, text: str, style: str,
    seed: Any, speed: Any, fmt: str, use_cache: bool,
) -> TTSRequest:  # fmt: skip
    """The form's values, in :data:`FORM_FIELDS` order, as a request (:meth:`SynthesisForm.request`)."""
    return SynthesisForm(mode, prompt_audio, voice, prompt_text, text, style, seed, speed, fmt, use_cache).request()


class Resolutions:
    """What the checks of a click resolved, so that the click resolves its form once:
    the first step that checks the form keeps the resolution, the event's validator
    finds the form good by it, and the handler gives it to the service (:meth:`take`).
    Kept :data:`_KEPT_SECONDS` at most (a click's steps follow each other at once; a
    voice saved again meanwhile is resolved again by the next click)."""

    def __init__(self, seconds: float | None = None, size: int = 64) -> None:
        self.seconds = _KEPT_SECONDS if seconds is None else seconds
        self.size = size
        self._kept: OrderedDict[Hashable, tuple[float, Resolved]] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, form: SynthesisForm | Sequence[Any], resolved: Resolved) -> None:
        key = _form_key(form)
        if key is None:
            return
        with self._lock:
            self._kept[key] = (time.monotonic() + self.seconds, resolved)
            self._kept.move_to_end(key)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def get(self, form: SynthesisForm | Sequence[Any]) -> Resolved | None:
        """The resolution kept for these form values, or None."""
        return self._find(form, take=False)

    def take(self, form: SynthesisForm | Sequence[Any]) -> Resolved | None:
        """:meth:`get`, forgetting it: a resolution serves one click."""
        return self._find(form, take=True)

    def _find(self, form: SynthesisForm | Sequence[Any], *, take: bool) -> Resolved | None:
        key = _form_key(form)
        if key is None:
            return None
        with self._lock:
            found = self._kept.pop(key, None) if take else self._kept.get(key)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]


#: How long a click's resolution is kept for its validator and handler.
_KEPT_SECONDS = 10.0


def _form_key(form: SynthesisForm | Sequence[Any]) -> Hashable | None:
    """The form itself (a Synthesise form) or the tuple of its values (the convert form's)."""
    key = form if isinstance(form, SynthesisForm) else tuple(form)
    try:
        hash(key)
    except TypeError:  # a value Gradio gave as a mapping: resolved each time
        return None
    return key


def form_errors(
    service: Resolving, form: SynthesisForm, resolutions: Resolutions | None = None
) -> dict[str, UIMessage]:  # fmt: skip
    """Every problem of the form by field, with the API's rules: the fields that stand
    alone first, then the request as a whole (voice, mode, prompt). With ``resolutions``,
    a form this click resolved already is good, and a form resolved here is kept there."""
    if resolutions is not None and resolutions.get(form) is not None:
        return {}
    errors = FieldErrors(FORM_FIELDS, paths=[form.prompt_audio])
    attempt = errors.attempt
    attempt("seed", lambda: form_seed(form.seed))
    attempt("speed", lambda: check_speed(form.speed))
    words = TTSRequest(text=form.text or "", style=form.style or "", prompt_text=form.prompt_text or "")
    attempt("text", lambda: normalise_fields(words, service.config))
    if not errors:

        def resolve() -> None:
            resolved = service.resolve(form.request())
            if resolutions is not None:
                resolutions.keep(form, resolved)

        attempt("mode", resolve)
    return dict(errors)


def form_note(
    mode: str, prompt_audio: str | None, voice: str | None, prompt_text: str, style: str,
    style_modes: Collection[str], saved: Collection[str],
) -> str:  # fmt: skip
    """The steps of ``mode`` and a sentence for each value the request will not use."""
    form = MODE_FORMS.get(mode)
    if form is None:
        return ""
    notes = []
    if prompt_audio and not form.prompt_audio:
        notes.append("已上传的参考音频在此模式下不使用 The uploaded recording is not used in this mode.")
    if prompt_audio and form.prompt_audio and voice:
        notes.append("将使用上传的录音，而不是列表中的音色 The uploaded recording is used, not the voice in the list.")
    if (prompt_text or "").strip() and not form.transcript:
        notes.append("参考音频文本在此模式下不使用 The prompt transcript is not used in this mode.")
    if form.transcript and not prompt_audio and voice in saved and not (prompt_text or "").strip():
        notes.append("将使用该音色保存时的文本 The transcript saved with this voice is used.")
    if (style or "").strip() and not style_used(mode, style_modes):
        notes.append("风格指令在此模式下不使用 The style instruction is not used in this mode.")
    lines = [f"**操作步骤 Steps**：{form.steps}"] + [f"ⓘ {n}" for n in notes]
    return "  \n".join(lines)
