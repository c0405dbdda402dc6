"""Readings in the Synthesise tab (issue 27): the reading of the text as the engine will
say it, under the text box (updated as the operator types), and the 读音 Readings panel
that lists the operator's lexicon and lets the admin add and delete entries.

Every reading comes from ``service.readings.preview`` (the front end the engines use,
memoised per text: about 2 ms per 100 characters), so the line is what will be said,
never a guess of the UI's own.
"""

from __future__ import annotations

import html
import logging
from typing import Any

import gradio as gr

from lib.core.logtext import cut_text
from lib.errors import TTSError
from lib.request.messages import explain
from lib.text.tokens import Reading
from lib.ui.base import HandlerBase

__all__ = ["ENTRY_HEADERS", "ReadingsPanel", "reading_html", "reading_line", "readings_panel"]

_LOGGER = logging.getLogger(__name__)

ENTRY_HEADERS = ["词语 Term", "读音 Reading", "音色 Voice (空=全部 all)"]


def reading_html(reading: Reading) -> str:
    """The reading as one line: each word with its reading above it (ruby); the words the
    operator's lexicon reads are marked (``data-source="lexicon"``)."""
    parts = []
    for t in reading.tokens:
        if t.kind == "pause":
            parts.append(f'<span class="reading-pause">{html.escape(t.text)}</span>')
            continue
        parts.append(
            f'<ruby class="reading-token" data-source="{html.escape(t.source)}" title="{html.escape(t.source)}">'
            f"{html.escape(t.text)}<rt>{html.escape(t.reading)}</rt></ruby>"
        )
    words = " ".join(parts)
    return (
        f'<div class="reading-line" id="reading-line-value" data-reading="{html.escape(reading.reading)}">'
        f'<span class="reading-label">读音 Reading：</span>{words}</div>'
    )


def _note(text: str) -> str:
    return f'<div class="reading-line reading-note">{html.escape(text)}</div>'


class ReadingsPanel:
    """The handlers of the reading line and the Readings panel, over one UI's handlers
    (their service, callers and in-place errors)."""

    def __init__(self, h: HandlerBase) -> None:
        self.h = h
        self.readings = h.service.readings

    def _read(self, text: str | None, voice: str | None) -> Reading | None:
        """The reading of ``text`` as ``voice`` says it; without the voice when it is no
        saved or preset voice (an uploaded recording: only global entries apply)."""
        if not (text or "").strip():
            return None
        try:
            return self.readings.preview(text, voice=voice or None)
        except TTSError:
            if not voice:
                raise
            return self.readings.preview(text)

    def line(self, text: str | None, voice: str | None) -> tuple[str, Any]:
        """The reading line under the text box, and the words of the text for the term
        field's list (a click fixes a word's reading)."""
        try:
            reading = self._read(text, voice)
        except TTSError as exc:  # while typing: said on the line, not raised
            return _note(f"✖ {explain(exc)}"), gr.update(choices=[])
        if reading is None:
            return "", gr.update(choices=[])
        words = list(dict.fromkeys(t.text for t in reading.tokens if t.kind == "zh" and t.text.strip()))
        return reading_html(reading), gr.update(choices=words)

    def table(self) -> list[list[str]]:
        """The operator's entries, one row each."""
        return [[str(e["term"]), str(e["reading"]), str(e.get("voice") or "")] for e in self.readings.entries()]

    def pick(self, word: str | None, text: str | None, voice: str | None) -> tuple[str, str]:
        """A word chosen from the text: the term field, and its current reading to edit."""
        if not word:
            return gr.skip(), gr.skip()
        try:
            reading = self._read(text, voice)
        except TTSError:
            reading = None
        found = next((t.reading for t in reading.tokens if t.text == word), "") if reading else ""
        return word, found

    def add(
        self, term: str, reading: str, scope: str | None, token: str, text: str | None, voice: str | None,
        request: gr.Request,
    ) -> tuple[str, list[list[str]], str, Any]:  # fmt: skip
        """Save an entry (the admin); say how many cached entries it made stale, and show
        the new reading of the current text."""
        try:
            done = self.readings.add(term, reading, scope or None, caller=self.h.caller(request, token))
        except TTSError as exc:
            self.h.fail("readings", request, explain(exc))
        entry = done["entry"]
        _LOGGER.info("lexicon entry %r added from the web UI", cut_text(str(entry["term"])))
        message = f"✔ 已保存 Saved：{entry['term']} → {entry['reading']}。" + _stale_words(done.get("stale"))
        return (message, self.table(), *self.line(text, voice))

    def remove(
        self, term: str, scope: str | None, token: str, text: str | None, voice: str | None, request: gr.Request
    ) -> tuple[str, list[list[str]], str, Any]:
        """Delete the entry of ``term`` (in ``scope``; the admin)."""
        try:
            done = self.readings.remove(term or "", scope or None, caller=self.h.caller(request, token))
        except TTSError as exc:
            self.h.fail("readings", request, explain(exc))
        message = f"✔ 已删除 Deleted：{done['deleted']['term']}。" + _stale_words(done.get("stale"))
        return (message, self.table(), *self.line(text, voice))


def _stale_words(stale: Any) -> str:
    if stale is None:
        return " 受影响的缓存条目数未知 The number of cached entries it made stale is not known (cache.store_text off)."
    return f" 使 {stale} 条缓存失效 It made {stale} cached entries stale (they are made again when next asked for)."


def reading_line(panel: ReadingsPanel, text: str | None, voice: str | None) -> gr.HTML:
    """The reading line (rendered where it is called: under the text box), filled at each
    page load with the reading of the pre-filled text."""
    return gr.HTML(value=lambda: panel.line(text, voice)[0], elem_id="reading-line", js_on_load=None)


def readings_panel(
    panel: ReadingsPanel, text: gr.Textbox, voice: gr.Dropdown, line: gr.HTML, token: gr.Textbox
) -> None:
    """The 读音 Readings accordion, and the reading ``line`` kept up with ``text`` and
    ``voice``."""
    h = panel.h
    with gr.Accordion("读音 Readings（发音词典 pronunciation lexicon）", open=False, elem_id="readings"):
        gr.Markdown(
            "引擎按下表读这些词（管理员可增删）。The engine reads these words as listed (the admin adds and deletes)."
            " 读音：拼音加声调数字，每字一个 Reading: pinyin with tone numbers 1-5, one per character (`lu4 an1`)."
        )
        entries = gr.Dataframe(
            headers=ENTRY_HEADERS, value=panel.table, interactive=False, elem_id="lexicon-table", wrap=True
        )
        with gr.Row():
            word = gr.Dropdown(
                [], value=None, label="文本中的词 A word of the text (选一个来修改 pick one to fix)",
                elem_id="reading-word", scale=2,
            )  # fmt: skip
            term = gr.Textbox(label="词语 Term", elem_id="lexicon-term", scale=2)
            reading = gr.Textbox(label="读音 Reading (e.g. lu4 an1)", elem_id="lexicon-reading", scale=2)
            scope = gr.Textbox(label="仅此音色 Only for voice (可选 optional)", elem_id="lexicon-voice", scale=2)
        with gr.Row():
            add = gr.Button("添加/修改 Add or change", variant="primary", elem_id="lexicon-add")
            remove = gr.Button("删除 Delete", variant="stop", elem_id="lexicon-delete")
        message = gr.Markdown(elem_id="lexicon-message")
        failure = gr.HTML(elem_id="lexicon-error", js_on_load=None)
    for changed in (text.change, voice.change):
        changed(
            panel.line, inputs=[text, voice], outputs=[line, word], trigger_mode="always_last", queue=False,
            show_progress="hidden", api_visibility="private",
        )  # fmt: skip
    word.input(panel.pick, inputs=[word, text, voice], outputs=[term, reading], api_visibility="private")
    outputs = [message, entries, line, word]
    for button, run, inputs in (
        (add, panel.add, [term, reading, scope, token, text, voice]),
        (remove, panel.remove, [term, scope, token, text, voice]),
    ):
        done = button.click(lambda: "", outputs=failure, queue=False, api_visibility="private").then(
            run, inputs=inputs, outputs=outputs, api_name=f"lexicon_{'add' if run == panel.add else 'delete'}",
            show_progress_on=[message],
        )  # fmt: skip
        done.failure(h.failure_view("readings"), outputs=failure, api_visibility="private")
