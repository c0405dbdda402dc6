"""The start-up preload (``webui.py --preload FILE``, what ``./run.sh`` starts): the app
serves while it runs, a phrase asked for before its turn is made then and once, its
progress is reported at ``GET /api/preload`` and on the terminal, and it ends with the
report ``preload_cache.py`` prints."""

from __future__ import annotations

import collections
import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import in_process, run_script, wait_until

from lib.batch.background import BackgroundPreload
from lib.engines.tone import ToneEngine
from lib.ui.cache_handlers import failure_lines
from lib.ui.preload_tab import preload_banner, preload_line

PHRASES = ["first announcement", "second announcement", "third announcement", "fourth announcement"]


class HeldTone(ToneEngine):
    """The tone engine, counting calls per text; a text in :attr:`held` waits for
    :attr:`release` (the preload stands on it while the test asks for others)."""

    def __init__(self, held: str) -> None:
        super().__init__()
        self.held = held
        self.release = threading.Event()
        self.texts: collections.Counter[str] = collections.Counter()

    def synthesise(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self.texts[text] += 1
        if text == self.held and not self.release.wait(30):
            raise RuntimeError("the test never released the held phrase")
        return super().synthesise(text, *args, **kwargs)


def phrase_list(path: Path) -> Path:
    phrases = [{"text": text, "voice": "low"} for text in PHRASES]
    doc = {"version": 1, "voices": {"low": {"preset": "tone-low"}}, "phrases": phrases}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_the_app_serves_while_the_preload_runs_and_a_phrase_asked_first_is_made_once(
    make_service: Any, tmp_path: Path
) -> None:
    from lib.api import create_app

    engine = HeldTone(held=PHRASES[0])
    service = make_service(engine=engine)
    out = io.StringIO()
    preload = BackgroundPreload(service, phrase_list(tmp_path / "hot.json"), out=out)
    with in_process(create_app(service, preload=preload)) as client:
        assert client.get("/api/preload").json()["state"] == "idle"
        preload.start()
        assert wait_until(lambda: engine.texts[PHRASES[0]] == 1)  # the preload stands on its first phrase
        status = client.get("/api/preload").json()
        assert (status["state"], status["total"], status["done"]) == ("running", 4, 0)
        assert "0/4" in preload_line(status) and 'class="preload-banner info"' in preload_banner(status)

        # Served meanwhile: the third phrase, before its turn, made now.
        answer = client.post("/api/tts", data={"text": PHRASES[2], "voice": "tone-low"})
        assert answer.status_code == 200 and answer.headers["x-cache"] == "MISS"
        assert client.get("/api/preload").json()["done"] == 0  # the preload has not moved

        engine.release.set()
        assert preload.wait(30) is not None
        status = client.get("/api/preload").json()
    assert status["state"] == "done"
    assert (status["total"], status["done"], status["generated"], status["cached"], status["failed"]) == (4, 4, 3, 1, 0)
    assert status["summary"].startswith("preload: 4 phrases, 3 generated, 1 already cached, 0 failed in ")
    assert status["summary"] in out.getvalue()  # the terminal gets preload_cache.py's report
    assert engine.texts == {text: 1 for text in PHRASES}  # the phrase asked for first was not made again
    assert preload_banner(status) == ""  # done, nothing failed: no banner
    assert "4 条 phrases" in preload_line(status)


def test_failures_and_an_unreadable_list_are_reported_and_the_app_keeps_serving(
    make_service: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lib.api import create_app

    engine = ToneEngine()
    engine.fail = RuntimeError("engine down")
    service = make_service(engine=engine)
    preload = BackgroundPreload(service, phrase_list(tmp_path / "hot.json"), out=io.StringIO())
    preload.start()
    assert preload.wait(30) is not None
    status = preload.status()
    assert (status["state"], status["failed"]) == ("done", 4)
    assert 'class="preload-banner warn"' in preload_banner(status)  # failures stay in view
    report = preload.report
    assert report is not None and report.labels["phrases[0]"] == "「first announcement」（tone-low）"
    lines = failure_lines(report)  # what the Preload tab lists under its line
    assert len(lines) == 4 and lines[0].startswith("- 「first announcement」（tone-low） · `phrases[0]`: ")
    assert "语音引擎出错" in lines[0] and "the tone engine failed (RuntimeError); nothing was cached" in lines[0]
    warning = capsys.readouterr().err  # what ./run.sh's terminal shows
    assert "preload: warning: 4 phrases failed; the UI makes them when asked" in warning

    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    unreadable = BackgroundPreload(service, broken, out=io.StringIO())
    unreadable.start()
    assert wait_until(lambda: unreadable.status()["state"] == "failed")
    status = unreadable.status()
    assert "broken.json" in status["error"] and "did not run" in preload_line(status)
    engine.fail = None
    with in_process(create_app(service, preload=unreadable)) as client:
        assert client.get("/api/preload").json()["state"] == "failed"
        assert client.post("/api/tts", data={"text": "still serving", "voice": "tone-low"}).status_code == 200


def test_stopping_the_app_ends_the_preload_after_the_phrase_in_progress(make_service: Any, tmp_path: Path) -> None:
    engine = HeldTone(held=PHRASES[1])
    service = make_service(engine=engine)
    preload = BackgroundPreload(service, phrase_list(tmp_path / "hot.json"), out=io.StringIO())
    preload.start()
    assert wait_until(lambda: engine.texts[PHRASES[1]] == 1)
    stopping = threading.Thread(target=preload.stop)
    stopping.start()
    engine.release.set()
    stopping.join(30)
    assert preload.status()["state"] == "stopped"
    assert preload.wait(1) is None  # no report: it did not finish
    assert engine.texts[PHRASES[2]] == 0 and engine.texts[PHRASES[3]] == 0


def test_webui_refuses_a_preload_list_that_does_not_exist(tmp_path: Path) -> None:
    code, _, err = run_script("webui", "--preload", str(tmp_path / "missing.json"), "--engine", "tone",
                              "--cache-dir", str(tmp_path / "cache"))  # fmt: skip
    assert code == 2
    assert "--preload" in err and "missing.json" in err and "no such file" in err


@pytest.mark.parametrize("state", ["loading", "running", "failed", "stopped"])
def test_every_state_has_words_for_the_operator(state: str) -> None:
    status: Any = {"state": state, "list": "hot.json", "total": 10, "done": 3, "generated": 2, "cached": 1,
                   "failed": 0, "seconds": 4.0, "summary": "", "error": "bad line 3"}  # fmt: skip
    line = preload_line(status)
    assert "hot.json" in line and any("\u4e00" <= ch <= "\u9fff" for ch in line)
