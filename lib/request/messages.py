"""Errors as the operator reads them: in Chinese and English, naming each field by its
label in the form, never by a code name or an internal path.

The service's messages are English and name fields as the API does (``prompt_text:
zero_shot mode needs ...``). :func:`explain` keeps that English (it says how to fix the
problem), puts the field's UI label in front, adds a Chinese sentence for every message
the web UI can meet, and removes temporary upload paths. One mapping, used by every tab.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from lib.errors import (
    ConflictError,
    EngineError,
    ForbiddenError,
    NotAudioError,
    NotFoundError,
    PayloadTooLargeError,
    PromptAudioError,
    StoreUnavailableError,
    TTSError,
    UnauthorizedError,
    ValidationError,
)
from lib.request.phrases import PhraseFileError

__all__ = ["FIELD_LABELS", "MODE_NAMES", "FieldErrors", "UIMessage", "explain", "explain_note", "scrub_paths"]

#: The service's field names -> the label the operator sees next to the input.
FIELD_LABELS = {
    "text": "合成文本 Text to speak",
    "prompt_text": "参考音频文本 Prompt transcript",
    "prompt_audio": "参考音频 Prompt audio",
    "source_audio": "源录音 Source recording",
    "style": "风格指令 Style",
    "seed": "随机种子 Seed",
    "speed": "语速 Speed",
    "voice": "音色 Voice",
    "mode": "模式 Mode",
    "format": "格式 Format",
    "tag": "模型版本 Model version",
    "voice_name": "音色名称 Voice name",
    "phrases": "短语列表 Phrase list",
}

#: Mode values -> how the mode selector names them.
MODE_NAMES = {
    "preset": "预置/已存音色 Preset or saved voice",
    "zero_shot": "零样本克隆 Zero-shot clone",
    "cross_lingual": "跨语种克隆 Cross-lingual clone",
    "instruct": "指令控制 Instruct",
    "convert": "变声 Convert",
}

# Code names that may appear inside an English sentence -> words the operator knows.
_IN_TEXT = {
    "zero_shot": "zero-shot clone",
    "cross_lingual": "cross-lingual clone",
    "prompt_text": "prompt transcript",
    "prompt_audio": "prompt audio",
    "source_audio": "source audio",
}

# (pattern on the English message without its field prefix, Chinese sentence). The
# Chinese may use the pattern's groups as {1}, {2}...
_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p), zh)
    for p, zh in [
        (r"must be a whole number from 0 to (\d+)", "须为 0 到 {1} 的整数"),
        (r"^(\S+) is out of range; use ([\d.]+) to ([\d.]+)", "{1} 超出范围，请填 {2} 到 {3}"),
        (r"must be a number from ([\d.]+) to ([\d.]+)", "须为 {1} 到 {2} 之间的数字"),
        (r"^is empty", "为空，请输入要合成的文字"),
        (r"is (\d+) characters, over the limit of (\d+)", "共 {1} 字，超过上限 {2} 字，请缩短或分几次合成"),
        (r"not valid Unicode", "含有无效字符，请删除"),
        (r"^must be text", "须为文字"),
        (r"zero_shot mode needs the transcript", "零样本克隆需要参考音频里说的话（逐字填写）"),
        (r"instruct mode needs a style instruction", "指令控制需要风格指令，例如「慢一点，平静」"),
        (r"upload or record the recording to convert", "请上传或录制要变声的源录音"),
        (r"upload or record the target voice", "请上传或录制目标音色，或选择预置或已存音色"),
        (r"cannot convert recordings", "当前引擎不能变声，请换用 builtin 或 cosyvoice 引擎"),
        (r"convert mode converts a recording", "变声模式请使用「变声 Convert」按钮"),
        (r"source[_ ]audio is ([\d.]+) s long; record at least ([\d.]+) s", "源录音只有 {1} 秒，请至少录 {2} 秒"),
        (r"source[_ ]audio is ([\d.]+) s long; trim it to at most ([\d.]+) s", "源录音长 {1} 秒，请剪到 {2} 秒以内"),
        (r"source[_ ]audio is ([\d.]+) MB, over the limit", "源录音文件太大，请上传较短的录音"),
        (r"source[_ ]audio is silent", "源录音几乎没有声音，请靠近麦克风重新录音"),
        (r"source audio is empty", "源录音是空的，请上传或录几秒说话声"),
        (
            r"source audio (?:is not decodable audio|file .* cannot be read|has no channels)",
            "源录音无法读取为音频，请上传 WAV、FLAC、OGG 或 MP3 录音",
        ),
        (r"(\w+) clones a prompt voice", "克隆模式需要参考音频：请上传或录音，或选择已存音色"),
        (r"preset needs a preset voice", "请选择一个预置音色"),
        (r"engine does not support (\w+)", "当前引擎不支持此模式，请换一种模式"),
        (r"engine failed .*nothing was cached", "语音引擎出错，没有缓存任何内容，请稍后重试"),
        (r"no saved or preset voice named", "没有这个音色，请从列表中选择"),
        (r"no saved voice named '(.+)'", "没有名为「{1}」的已存音色"),
        (r"pick a preset or saved voice", "请从列表中选择一个音色"),
        (r"pick a voice", "请先选择音色"),
        (r"upload or record a prompt", "请上传或录制参考音频，或选择已存音色"),
        (r"^no voice", "没有音色：请上传或录制参考音频，或选择音色"),
        (r"either prompt_audio or voice", "参考音频和音色只能二选一"),
        (r"is not supported; use one of", "不支持此格式"),
        (
            r"prompt audio is ([\d.]+) s long; record at least ([\d.]+) s",
            "参考音频只有 {1} 秒，请至少录 {2} 秒",
        ),
        (r"prompt audio is ([\d.]+) s long; trim it to at most ([\d.]+) s", "参考音频长 {1} 秒，请剪到 {2} 秒以内"),
        (r"prompt audio is silent|almost no sound", "参考音频几乎没有声音，请靠近麦克风重新录音"),
        (r"prompt audio is empty", "参考音频是空的，请上传或录几秒说话声"),
        (r"too short to be a voice", "参考音频太短，请至少录 1 秒说话声"),
        (r"not decodable audio|cannot be read", "无法读取为音频，请上传 WAV、FLAC、OGG 或 MP3 录音"),
        (r"outside the range of human speech", "参考音频的音高不像人声，请换一段录音"),
        (r"invalid samples", "音频含有无效采样"),
        (r"voice name '(.*)' is not allowed", "「{1}」不可用：请用 1–64 个字母、数字、空格或 . - _，以字母或数字开头"),
        (r"voice name '(.*)' is taken", "「{1}」已被使用：请换一个名称，或由管理员勾选「替换」"),
        (r"voice name '(.*)' is a preset voice", "「{1}」是预置音色的名称，请换一个名称"),
        (
            r"voice name '(.*)' looks like the \w+ voice '(.*)'",
            "「{1}」看起来和音色「{2}」一样（易混淆的字符），请换一个名称",
        ),
        (r"voice name '(.*)' mixes", "「{1}」混用了外形相近的不同文字，容易冒充其他名称，请只用一种文字书写"),
        (r"presets cannot be deleted", "预置音色不能删除"),
        (r"upload or record the voice to save", "请上传或录制要保存的声音"),
        (r"the admin token is wrong", "管理员令牌不正确"),
        (r"from another machine that needs an admin token", "只有管理员可以这样做：从其他机器操作需要管理员令牌"),
        (r"send the admin token", "只有管理员可以这样做：请在页面顶部「管理员登录」中登录"),
        (r"voice library cannot write now", "音色库暂时无法写入，未做任何更改，请稍后再试"),
        (r"give engine:model_version", "请从列表中选择要清除的模型版本"),
        (r"returned (empty audio|silence)", "引擎没有生成声音，未缓存任何内容，请重试或换一段文字"),
        (r"produced invalid audio", "引擎生成的声音有误（无效、过短或无声），未缓存任何内容，请重试或换一段文字"),
        (
            r"failed its check at load",
            "Kokoro 基础音色未通过加载时的自检，暂不可用；请安装固定版本的 onnxruntime 或改用 espeak 基础音色",
        ),
    ]
]

# When no rule matches: a Chinese sentence by kind of error (most specific first).
_BY_KIND: list[tuple[type[TTSError], str]] = [
    (PhraseFileError, "短语列表有误"),
    (PayloadTooLargeError, "文件太大"),
    (NotAudioError, "无法读取为音频"),
    (PromptAudioError, "参考音频不可用"),
    (ValidationError, "输入有误"),
    (NotFoundError, "未找到"),
    (ConflictError, "名称已被使用"),
    (UnauthorizedError, "需要管理员令牌"),
    (ForbiddenError, "无权操作"),
    (StoreUnavailableError, "存储暂时无法写入"),
    (EngineError, "合成失败，未缓存任何内容"),
    (TTSError, "操作失败"),
]

_PREFIX = re.compile(
    r"^(prompt_text|prompt_audio|prompt audio|source_audio|text|style|seed|speed|voice|mode|format|tag): "
)
# Gradio keeps uploads under <tempdir>/gradio/<hash>/; no such path is shown as it is.
_GRADIO_TMP = re.compile(r"(?:/[^\s'\"]*)?/gradio/[0-9a-f]{16,}/")


@dataclass(frozen=True)
class UIMessage:
    """An error for the operator: the form field it concerns (None if none) and the text."""

    field: str | None
    text: str

    def __str__(self) -> str:
        return self.text


def scrub_paths(message: str, paths: Iterable[str | Path | None] = ()) -> str:
    """``message`` without server-side paths: an uploaded file is named by its file name
    (a path under it by its part below the upload's folder)."""
    for path in paths:
        if not path:
            continue
        p = Path(path)
        message = message.replace(f"{p.parent}/", "").replace(str(p), p.name)
    return _GRADIO_TMP.sub("", message)


def explain(exc: TTSError, *, paths: Iterable[str | Path | None] = ()) -> UIMessage:
    """``exc`` as a bilingual message naming the field by its UI label."""
    message = scrub_paths(str(exc), paths)
    field: str | None = None
    rest = message
    m = _PREFIX.match(message)
    if m:
        field = m.group(1).replace(" ", "_")
        rest = message[m.end() :]
    elif message.startswith(("prompt audio", "no voice")):
        field = "prompt_audio"
    elif message.startswith(("source audio", "source_audio")):
        field = "source_audio"
    elif message.startswith("voice name"):
        field = "voice_name"
    elif message.startswith("no saved voice named"):
        field = "voice"
    if field == "mode" and re.search(r"clones a prompt voice", rest):
        field = "prompt_audio"  # the fix is an upload or a saved voice
    elif field == "mode" and re.search(r"preset needs", rest):
        field = "voice"
    zh = _chinese(exc, rest)
    english = _plain(rest)
    if field is not None:
        return UIMessage(field, f"{FIELD_LABELS[field]}：{zh} — {english}")
    return UIMessage(None, f"{zh} — {english}")


def _chinese(exc: TTSError, english: str) -> str:
    for pattern, zh in _RULES:
        m = pattern.search(english)
        if m:
            return zh.format(None, *m.groups())
    for kind, zh in _BY_KIND:
        if isinstance(exc, kind):
            return zh
    return "操作失败"  # pragma: no cover - TTSError is the last kind


def _plain(english: str) -> str:
    """The English sentence with code names replaced by the words of the form."""
    for code, words in _IN_TEXT.items():
        english = re.sub(rf"\b{code}\b", words, english)
    return english


# Why the export skipped a phrase (lib.batch.export's sentences) -> Chinese.
_EXPORT_NOTES = [
    (
        re.compile(r"spoken in an uploaded recording"),
        "用未保存的上传录音合成，无法导出；请先在「音色」页保存",
    ),
    (re.compile(r"cannot be requested again as it was"), "无法按原样再次请求（例如音色已删除）"),
    (re.compile(r"which a phrase list cannot choose"), "短语列表无法指定该模式"),
    (re.compile(r"voice or model that changed"), "音色已重新保存或引擎已升级，与原结果不同"),
]


class FieldErrors(dict[str, UIMessage]):
    """A form's problems by field, the first one per field: :meth:`attempt` runs a
    check and files its refusal under the field the message names when the form has
    that field, else under the field the check was made for."""

    def __init__(self, fields: Collection[str], paths: Iterable[str | Path | None]) -> None:
        super().__init__()
        self._fields = fields
        self._paths = list(paths)

    def attempt(self, field: str, check: Callable[[], object]) -> None:
        try:
            check()
        except TTSError as exc:
            message = explain(exc, paths=self._paths)
            named = message.field
            self.setdefault(named if named is not None and named in self._fields else field, message)


def explain_note(note: str) -> str:
    """One skip reason of the export, in Chinese and English."""
    for pattern, zh in _EXPORT_NOTES:
        if pattern.search(note):
            return f"{zh} — {note}"
    return f"未导出 — {note}"
