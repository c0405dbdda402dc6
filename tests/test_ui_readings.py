"""The reading line and the 读音 Readings panel (lib.ui.readings_panel) over a real
service on the tone engine: what the line shows comes from the front end the engines
use, and an admin's entry changes it and says what it made stale."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import pytest
from conftest import tone_service

from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest
from lib.ui.base import HandlerBase
from lib.ui.readings_panel import ReadingsPanel

TOKEN = "s3cret-token"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = tone_service(tmp_path, admin_token=TOKEN)
    yield svc
    svc.close()


@pytest.fixture
def panel(service: TTSService) -> ReadingsPanel:
    return ReadingsPanel(HandlerBase(service, Path("hot_phrases.json")))


def test_line_is_the_front_ends_reading_with_its_words(panel: ReadingsPanel, service: TTSService) -> None:
    line, words = panel.line("拨打110去六安", None)
    assert f'data-reading="{service.readings.preview("拨打110去六安").reading}"' in line
    assert "<rt>yao1 yao1 ling2</rt>" in line  # the emergency number's convention, from the front end
    assert words["choices"] == ["拨打", "110", "去", "六安"]
    assert panel.line("   ", None)[0] == ""  # nothing typed: no line
    # An uploaded recording is no named voice: the text is read with the global entries.
    assert panel.line("拨打110", "no-such-voice")[0] == panel.line("拨打110", None)[0]


def test_add_marks_the_entry_says_what_it_made_stale_and_delete_restores(
    panel: ReadingsPanel, service: TTSService
) -> None:
    service.synthesise(TTSRequest(text="请到长春站换乘", voice="tone-low"))
    service.cache.flush()
    before, _ = panel.line("请到长春站换乘", "tone-low")
    assert 'data-source="lexicon"' not in before
    word, reading = panel.pick("长春", "请到长春站换乘", "tone-low")
    assert word == "长春" and reading  # the word's current reading, to edit
    message, table, line, _ = panel.add("长春", "chang2 chun1", "", TOKEN, "请到长春站换乘", "tone-low", None)  # type: ignore[arg-type]
    assert ["长春", "chang2 chun1", ""] in table
    assert "1 条缓存失效" in message and "1 cached entries stale" in message  # the cached phrase says it
    assert '<ruby class="reading-token" data-source="lexicon" title="lexicon">长春<rt>chang2 chun1</rt>' in line
    message, table, line, _ = panel.remove("长春", "", TOKEN, "请到长春站换乘", "tone-low", None)  # type: ignore[arg-type]
    assert table == [] and "已删除 Deleted" in message
    assert 'data-source="lexicon"' not in line


@pytest.mark.parametrize(
    ("term", "reading", "token", "said"),
    [
        ("六安", "lu4", TOKEN, "六安"),  # one syllable for two characters: the backend names the entry
        ("六安", "lu9 an1", TOKEN, "lu9"),  # tone outside 1-5
        ("六安", "lu4 an1", "wrong", "令牌"),  # not the admin: refused, bilingual
    ],
)
def test_bad_entries_are_the_backends_message_and_change_nothing(
    panel: ReadingsPanel, service: TTSService, term: str, reading: str, token: str, said: str
) -> None:
    with pytest.raises(gr.Error):
        panel.add(term, reading, "", token, "去六安", None, None)  # type: ignore[arg-type]
    shown = panel.h.failure_view("readings")(None)  # type: ignore[arg-type]
    assert said in shown and "ui-error" in shown
    assert service.readings.entries() == []
