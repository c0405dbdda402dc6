"""Approved takes and phrase lists: a phrase without ``seed`` is its approved take,
*Export top phrases* writes the approved seed (and the take's digest), and the preload
reports a rebuilt take that differs from the approved one (real store, tone engine;
a deliberately non-deterministic engine for the last)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from conftest import preload_main

from lib.batch.export import export_phrases
from lib.batch.preload import preload
from lib.config import load_config
from lib.engines.base import Synthesis, VoiceProfile
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.phrases import load_phrases
from lib.request.types import TTSRequest
from lib.text.tokens import Reading

REPO = Path(__file__).resolve().parents[1]
TEXT = "The last ferry leaves at nine"


class WobblyTone(ToneEngine):
    """Not deterministic: every call adds a little noise of its own."""

    def synthesise(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Synthesis:  # fmt: skip
        made = super().synthesise(text, voice, style=style, seed=seed, speed=speed, mode=mode, reading=reading)
        noise = np.random.default_rng(self.calls).normal(0, 0.01, made.audio.shape).astype(np.float32)
        return Synthesis(made.audio + noise, made.info)


def make(folder: Path, engine: ToneEngine | None = None) -> TTSService:
    values: dict[str, Any] = {"engine": "tone", "cache.dir": str(folder), "voices.prewarm": False}
    return TTSService(load_config(env={}, overrides=values), engine or ToneEngine())


def phrase_list(path: Path, *phrases: dict[str, Any]) -> Path:
    doc = {"version": 1, "voices": {"desk": {"preset": "tone-low"}}, "phrases": list(phrases)}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_a_phrase_without_seed_is_its_approved_take(tmp_path: Path) -> None:
    svc = make(tmp_path / "cache")
    try:
        take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=5))
        svc.takes.approve(take.key, caller=LOCAL)
        calls = svc.engine.calls  # type: ignore[attr-defined]
        listed = phrase_list(tmp_path / "hot.json", {"text": TEXT, "voice": "desk"})
        (request,) = load_phrases(listed)
        assert request.seed is None
        report = preload(svc, load_phrases(listed), caller=LOCAL)
        assert (report.cached, report.generated) == (1, 0)
        assert svc.engine.calls == calls  # type: ignore[attr-defined]  # nothing made: the approved take
        seeded = phrase_list(tmp_path / "seeded.json", {"text": TEXT, "voice": "desk", "seed": 0})
        assert preload(svc, load_phrases(seeded), caller=LOCAL).generated == 1  # seed 0 named: its own render
    finally:
        svc.close()


def test_export_writes_the_approved_seed_and_a_fresh_deployment_rebuilds_the_same_take(tmp_path: Path) -> None:
    svc = make(tmp_path / "a")
    try:
        take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=7))
        svc.takes.approve(take.key, caller=LOCAL)
        for _ in range(3):  # requested without a seed: the top phrase, answered the approved take
            assert svc.synthesise(TTSRequest(text=TEXT, voice="tone-low")).take == "approved"
        svc.synthesise(TTSRequest(text="Another announcement", voice="tone-low"))
        doc, notes = export_phrases(svc, 10, caller=LOCAL)
        assert notes == []
        mine = [p for p in doc["phrases"] if p["text"] == TEXT]
        assert mine == [{"text": TEXT, "voice": "tone-low", "seed": 7, "take": mine[0]["take"]}]
        other = next(p for p in doc["phrases"] if p["text"] == "Another announcement")
        assert "seed" not in other and "take" not in other
    finally:
        svc.close()
    exported = tmp_path / "exported.json"
    exported.write_text(json.dumps(doc), encoding="utf-8")
    fresh = make(tmp_path / "b")
    try:
        report = preload(fresh, load_phrases(exported), caller=LOCAL)
        assert report.generated == 2 and report.differs == []
        rebuilt = fresh.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=7))
        assert rebuilt.key == take.key and rebuilt.wav == take.wav  # the same take, rebuilt
    finally:
        fresh.close()
    wobbly = make(tmp_path / "c", WobblyTone())
    try:
        report = preload(wobbly, load_phrases(exported), caller=LOCAL)
        assert report.differs == ["phrases[0]"]  # the approved phrase: the top one
        assert any("rebuilt audio differs from the approved take" in line for line in report.differs_lines())
    finally:
        wobbly.close()


def test_a_forced_preload_reports_a_take_rebuilt_differently_and_keeps_the_approved_audio(tmp_path: Path) -> None:
    svc = make(tmp_path / "cache", WobblyTone())
    try:
        take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=2))
        svc.takes.approve(take.key, caller=LOCAL)
        listed = phrase_list(
            tmp_path / "hot.json", {"text": TEXT, "voice": "desk"}, {"text": "Stand clear", "voice": "desk"}
        )
        assert preload(svc, load_phrases(listed), caller=LOCAL).differs == []
        report = preload(svc, load_phrases(listed), force=True, caller=LOCAL)
        assert report.differs == ["phrases[0]"] and report.generated == 2
        served = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low"))
        assert served.take == "approved" and served.wav == take.wav  # the approved audio, not the rebuild
        svc.cache.drop_memory()
        assert svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=2)).wav == take.wav
    finally:
        svc.close()


def test_the_preload_script_says_an_approved_phrase_is_cached(tmp_path: Path) -> None:
    svc = make(tmp_path / "cache")
    take = svc.synthesise(TTSRequest(text=TEXT, voice="tone-low", seed=3))
    svc.takes.approve(take.key, caller=LOCAL)
    svc.close()
    listed = phrase_list(tmp_path / "hot.json", {"text": TEXT, "voice": "desk"})
    code, out, err = preload_main("--cache-dir", str(tmp_path / "cache"), "--engine", "tone", "--phrases", str(listed))
    assert code == 0, err
    assert "1 phrases, 0 generated, 1 already cached, 0 failed" in out
