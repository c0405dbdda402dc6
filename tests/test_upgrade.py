"""Warm model upgrades (issue 11 item 6) with the tone engine in two versions: a new
version is preloaded beside the serving one in the same cache directory, the serving
service reports per version how many hot phrases are ready, and evicting the old version
removes exactly its entries. (The same with real CosyVoice model directories and
``preload_cache.py --model-dir`` is in tests/test_cosyvoice_engine.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lib.batch.preload import preload
from lib.config import AppConfig, load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.phrases import expand, load_phrases
from lib.request.types import TTSRequest


class ToneV2(ToneEngine):
    model_version = "tone-2"


@pytest.fixture
def config(tmp_path: Path) -> AppConfig:
    phrases = tmp_path / "hot.json"
    phrases.write_text(
        json.dumps({
            "voices": {"low": "tone-low", "high": "tone-high"},
            "phrases": [
                {"text": "欢迎光临", "voice": "low"},
                {"text": "请A023号顾客到3号窗口办理业务", "voice": "high"},
                {"text": "Mind the gap", "voice": "low", "seeds": [0, 1]},
            ],
        }),
        encoding="utf-8",
    )  # fmt: skip
    return load_config(env={}, overrides={
        "engine": "tone", "cache.dir": str(tmp_path / "c"), "templates.file": str(phrases),
    })  # fmt: skip


@pytest.fixture
def serving(config: AppConfig) -> Iterator[TTSService]:
    svc = TTSService(config, ToneEngine())
    yield svc
    svc.close()


def _rows(svc: TTSService) -> dict[str, dict[str, Any]]:
    svc.dashboard.readiness._answer = None  # type: ignore[union-attr]  # the answer is kept 30 s
    return {row["tag"]: row for row in svc.dashboard.snapshot(caller=LOCAL)["model_versions"]}


def test_a_new_version_fills_beside_the_serving_one(config: AppConfig, serving: TTSService) -> None:
    assert _rows(serving) == {
        "tone:tone-1": {"tag": "tone:tone-1", "engine": "tone", "model_version": "tone-1", "entries": 0,
                        "hot_ready": 0, "hot_total": 4, "serving": True,
                        "hot_missing": [
                            "「欢迎光临」（tone-low）", "「请A023号顾客到3号窗口办理业务」（tone-high）",
                            "「Mind the gap」（tone-low, seed 0）", "「Mind the gap」（tone-low, seed 1）",
                        ], "pieces_ready": 0, "pieces_total": 0, "pieces_missing": []},
    }  # fmt: skip
    serving.synthesise(TTSRequest(text="欢迎光临", voice="tone-low"))  # the serving version answers users
    upgrade = TTSService(config, ToneV2())  # preload_cache.py --model-dir NEW, beside the server
    try:
        report = preload(upgrade, expand(load_phrases(str(config.templates.file))), caller=LOCAL)
        assert (report.generated, report.failed) == (4, 0)
        upgrade.cache.flush()
    finally:
        upgrade.close()
    serving.cache.flush()
    rows = _rows(serving)
    assert rows["tone:tone-1"]["hot_ready"] == 1 and rows["tone:tone-1"]["serving"] is True
    assert "「欢迎光临」（tone-low）" not in rows["tone:tone-1"]["hot_missing"]  # asked for by a user: made
    assert len(rows["tone:tone-1"]["hot_missing"]) == 3 and rows["tone:tone-2"]["hot_missing"] == []
    assert rows["tone:tone-2"]["hot_ready"] == 4 and rows["tone:tone-2"]["entries"] == 4
    assert rows["tone:tone-2"]["serving"] is False
    # The old version keeps serving its own audio meanwhile: a hit, no engine call.
    calls = serving.engine.calls  # type: ignore[attr-defined]
    assert serving.synthesise(TTSRequest(text="欢迎光临", voice="tone-low")).cache == "HIT"
    assert serving.engine.calls == calls  # type: ignore[attr-defined]


def test_after_the_switch_the_old_version_is_evicted(config: AppConfig, serving: TTSService) -> None:
    preload(serving, expand(load_phrases(str(config.templates.file))), caller=LOCAL)
    serving.close()
    switched = TTSService(config, ToneV2())  # the restart with the new model
    try:
        preload(switched, expand(load_phrases(str(config.templates.file))), caller=LOCAL)
        switched.cache.flush()
        assert _rows(switched)["tone:tone-1"]["hot_ready"] == 4
        done = switched.admin.evict("tone:tone-1", caller=LOCAL)
        assert done["removed"] == 4
        rows = _rows(switched)
        assert "tone:tone-1" not in rows
        assert rows["tone:tone-2"] == {
            "tag": "tone:tone-2", "engine": "tone", "model_version": "tone-2", "entries": 4,
            "hot_ready": 4, "hot_total": 4, "hot_missing": [], "serving": True,
            "pieces_ready": 0, "pieces_total": 0, "pieces_missing": [],
        }  # fmt: skip
    finally:
        switched.close()


def test_readiness_without_a_phrase_file(tmp_path: Path) -> None:
    config = load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "c"), "templates.file": None})
    svc = TTSService(config, ToneEngine())
    try:
        assert svc.dashboard.snapshot(caller=LOCAL)["model_versions"][0]["hot_total"] == 0
    finally:
        svc.close()


def test_the_dashboard_shows_each_version_ready(config: AppConfig, serving: TTSService) -> None:
    """The Cache tab's figures (as the UI renders them): a line per model version with
    its hot phrases ready, the serving version marked."""
    from lib.ui.cache_handlers import CacheHandlers

    serving.synthesise(TTSRequest(text="欢迎光临", voice="tone-low"))
    upgrade = TTSService(config, ToneV2())
    try:
        preload(upgrade, expand(load_phrases(str(config.templates.file))), caller=LOCAL)
        upgrade.cache.flush()
    finally:
        upgrade.close()
    serving.cache.flush()
    serving.dashboard.readiness._answer = None  # type: ignore[union-attr]  # the answer is kept 30 s
    text = CacheHandlers(serving, Path(str(config.templates.file))).refresh_cache()[0]
    assert "热门短语就绪 Hot phrases ready, per model version" in text
    assert "- `tone:tone-1` **（当前 serving）**: 就绪 ready 1/4 · 1 entry" in text
    assert "- `tone:tone-2`: 就绪 ready 4/4 · 4 entries" in text
    assert text.index("tone:tone-1` **") < text.index("`tone:tone-2`")  # the serving version first


TEMPLATED = {
    "voices": {"low": "tone-low"},
    "phrases": [{"text": "欢迎光临", "voice": "low"}, {"text": "Mind the gap", "voice": "low"}],
    "templates": [{"template": "请到{window}号窗口。", "voice": "low",
                   "slots": {"window": {"values": [str(n) for n in range(1, 11)]}}}],
}  # fmt: skip


def test_make_missing_makes_what_the_stats_name_for_the_admin_only(tmp_path: Path) -> None:
    """``GET /api/cache/stats`` counts the hot phrases and the template pieces ready and
    names the first missing ones; ``POST /api/cache/make-missing`` (admin: 401 without
    a token, 403 with a wrong one) makes them, after which every one is ready."""
    from conftest import in_process

    from lib.api import create_app

    phrases = tmp_path / "hot.json"
    phrases.write_text(json.dumps(TEMPLATED, ensure_ascii=False), encoding="utf-8")
    config = load_config(env={}, overrides={
        "engine": "tone", "cache.dir": str(tmp_path / "c"), "templates.file": str(phrases), "voices.prewarm": False,
    })  # fmt: skip
    engine = ToneEngine()
    svc = TTSService(config, engine, admin_token="tok")
    try:
        svc.synthesise(TTSRequest(text="欢迎光临", voice="tone-low"))
        svc.cache.flush()
        pieces = len(svc.templates.pieces(svc.templates.templates()[0]))
        assert pieces == 12  # 请到, 一 ... 十, 号窗口。
        with in_process(create_app(svc)) as client:
            (row,) = client.get("/api/cache/stats").json()["model_versions"]
            assert (row["hot_ready"], row["hot_total"]) == (1, 2)
            assert (row["pieces_ready"], row["pieces_total"]) == (0, pieces)
            assert row["hot_missing"] == ["「Mind the gap」（tone-low）"]
            assert len(row["pieces_missing"]) == 5
            assert row["pieces_missing"][0] == "模板片段 template piece「请到」（tone-low）"
            assert client.post("/api/cache/make-missing").status_code == 401
            assert client.post("/api/cache/make-missing", headers={"Authorization": "Bearer bad"}).status_code == 403
            assert engine.calls == 1  # a refused call makes nothing
            made = client.post("/api/cache/make-missing", headers={"Authorization": "Bearer tok"})
            assert made.status_code == 200, made.text
            body = made.json()
            assert (body["made"], body["cached"], body["failed"], body["failures"]) == (1 + pieces, 1, 0, [])
            (row,) = client.get("/api/cache/stats").json()["model_versions"]
            assert (row["hot_ready"], row["pieces_ready"]) == (2, pieces)
            assert row["hot_missing"] == [] and row["pieces_missing"] == []
            calls = engine.calls
            assert client.post("/api/cache/make-missing", headers={"Authorization": "Bearer tok"}).json()["made"] == 0
            assert engine.calls == calls  # nothing missing: nothing made
    finally:
        svc.close()
