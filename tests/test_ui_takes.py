"""Takes in the UI (lib.ui.takes_panel) over a real service on the tone engine: Try takes
renders N takes through the backend, Approve makes the empty-seed form answer that take
(badge 已审核 Approved), and the Cache tab lists approvals made by another model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import pytest
import soundfile as sf
from server_process import NO_ANONYMOUS_LIMITS

from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from lib.ui.handlers import Handlers
from lib.ui.takes_panel import MAX_UI_TAKES, TakesPanel

TOKEN = "s3cret-token"
TEXT = "请A023号顾客到3号窗口"
QUIET = {"progress": lambda *a, **k: None}


class ToneTwo(ToneEngine):
    model_version = "tone-2"


def make_service(folder: Path, engine: ToneEngine | None = None) -> TTSService:
    values: dict[str, Any] = {"engine": "tone", "cache.dir": str(folder), "voices.prewarm": False}
    return TTSService(load_config(env=NO_ANONYMOUS_LIMITS, overrides=values), engine or ToneEngine(), admin_token=TOKEN)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = make_service(tmp_path / "cache")
    yield svc
    svc.close()


def form(seed: Any = "", text: str = TEXT) -> list[Any]:
    return ["preset", None, "tone-low", "", text, "", seed, 1.0, "wav", True]


def test_try_takes_shows_n_players_with_seed_and_duration_and_approve_serves_it(service: TTSService) -> None:
    h = Handlers(service, Path("hot.json"))
    panel = TakesPanel(h)
    message, *rest = panel.render(3, *form(), None)  # type: ignore[arg-type]
    players, buttons, withdraw, shown = rest[:MAX_UI_TAKES], rest[MAX_UI_TAKES : 2 * MAX_UI_TAKES], rest[-2], rest[-1]
    keys = [key for key, _ in shown]
    assert [seed for _, seed in shown] == [0, 1, 2]
    assert [p["visible"] for p in players] == [True, True, True, False]
    assert [b["visible"] for b in buttons] == [True, True, True, False]
    assert withdraw["visible"] is False  # nothing approved yet
    assert len(set(keys)) == 3 and "3 takes" in message
    for i, p in enumerate(players[:3]):
        assert f"种子 seed {i} ·" in p["label"]  # the backend's seeds: the form names none, so 0, 1, 2
        seconds = sf.info(p["value"]).duration
        assert f"{seconds:.2f} s" in p["label"]
    # No approval yet: the empty seed field is seed 0's key, no Approved mark.
    _, badge, details, *_ = h.synthesise(*form(), [], None, **QUIET)  # type: ignore[arg-type]
    assert keys[0] in details and "已审核" not in badge
    with pytest.raises(gr.Error):  # not the admin
        panel.approver(2, "takes")(shown, "wrong", None)  # type: ignore[arg-type]
    assert "令牌" in h.failure_view("takes")(None)  # type: ignore[arg-type]
    said, *marks = panel.approver(2, "takes")(shown, TOKEN, None)  # type: ignore[arg-type]
    assert "seed 2" in said and "已采用 Approved" in said
    labels = [m["value"] for m in marks[:3]]
    assert labels == ["采用 Approve (seed 0)", "采用 Approve (seed 1)", "✔ 已采用 Approved (seed 2)"]
    assert marks[-1]["visible"] is True  # Withdraw shows while one is approved
    _, badge, details, *_ = h.synthesise(*form(), [], None, **QUIET)  # type: ignore[arg-type]
    assert keys[2] in details and "已审核 Approved" in badge and 'data-cache="HIT"' in badge
    assert "_seed2_" in details  # the approved answer's file is named by its own seed
    _, badge, details, *_ = h.synthesise(*form(seed="0"), [], None, **QUIET)  # type: ignore[arg-type]
    assert keys[0] in details and "已审核" not in badge  # a named seed gets that seed's render
    said, *marks = panel.withdrawer("takes")(shown, TOKEN, None)  # type: ignore[arg-type]
    assert "Withdrawn: seed 2" in said and marks[2]["value"] == "采用 Approve (seed 2)"
    assert marks[-1]["visible"] is False
    _, badge, details, *_ = h.synthesise(*form(), [], None, **QUIET)  # type: ignore[arg-type]
    assert keys[0] in details and "已审核" not in badge  # the default seed's render again


def test_bad_takes_requests_are_messages(service: TTSService) -> None:
    panel = TakesPanel(Handlers(service, Path("hot.json")))
    with pytest.raises(gr.Error):
        panel.render(3, *form(text=""), None)  # type: ignore[arg-type]
    assert "合成文本" in panel.h.failure_view("takes")(None)  # type: ignore[arg-type]
    with pytest.raises(gr.Error):
        panel.approver(0, "takes")([], TOKEN, None)  # type: ignore[arg-type]
    assert "Try takes first" in panel.h.failure_view("takes")(None)  # type: ignore[arg-type]


def test_needs_review_lists_old_model_approvals_and_renders_them_anew(tmp_path: Path) -> None:
    old = make_service(tmp_path / "cache")
    take = old.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=1))
    old.takes.approve(take.key, caller=LOCAL)
    assert TakesPanel(Handlers(old, Path("hot.json"))).review()[0] == []  # same model: nothing to review
    old.close()
    new = make_service(tmp_path / "cache", ToneTwo())
    try:
        panel = TakesPanel(Handlers(new, Path("hot.json")))
        table, pick = panel.review()
        assert [row[:4] for row in table] == [[TEXT, "tone-low", "1", "tone-1"]]
        assert [value for _, value in pick["choices"]] == [take.key]
        _, *rest = panel.render_review(take.key, 2, None)  # type: ignore[arg-type]
        keys = rest[-1]
        assert len(keys) == 2 and take.key not in keys  # rendered on the serving model: new keys
        panel.approver(1, "review")(keys, TOKEN, None)  # type: ignore[arg-type]
        assert panel.review()[0] == []  # approving one moved the approval: reviewed
        with pytest.raises(gr.Error):
            panel.render_review(None, 2, None)  # type: ignore[arg-type]
    finally:
        new.close()
