"""``preload_cache.py`` and the hot-phrase schema (``lib.request.phrases``): the real script's
``main`` in this process (and a real process where the process is the point: killed midway)
on a cache under ``tmp_path``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, preload_main

from lib.config import load_config
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.phrases import PhraseFileError, load_phrases, parse_phrases

SUMMARY = re.compile(r"^preload: (\d+) phrases, (\d+) generated, (\d+) already cached, (\d+) failed in [0-9.]+ s$")
A = {"a": "tone-low"}
BUILTIN_PRESETS = {"zh-female", "zh-male", "en-female", "en-male", "yue-female"}


def run_preload(
    *args: str, cache: Path, engine: str = "tone", env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """``preload_cache.py`` by its ``main`` (:func:`conftest.preload_main`), on the espeak base
    (the fast suite's, docs/kokoro.md)."""
    env = {"TTS_BUILTIN_BASE": "espeak", **(env or {})}
    return preload_main("--cache-dir", str(cache), "--engine", engine, *args, env=env)


def summary(stdout: str) -> tuple[int, int, int, int]:
    lines = [line for line in stdout.splitlines() if line.startswith("preload:")]
    assert len(lines) == 1, stdout
    match = SUMMARY.match(lines[0])
    assert match, lines[0]
    n, g, c, f = (int(x) for x in match.groups())
    assert n == g + c + f
    return n, g, c, f


def write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


def tone_list(tmp_path: Path, count: int = 4) -> Path:
    phrases = [{"text": f"请A{i:03d}号顾客到3号窗口办理业务", "voice": "low"} for i in range(count)]
    phrases.append({"text": "Mind the gap", "voice": "high", "seeds": [1, 2], "styles": ["", "slow"]})
    voices = {"low": {"preset": "tone-low"}, "high": "tone-high"}
    return write(tmp_path / "hot.json", {"version": 1, "voices": voices, "phrases": phrases})


def test_second_run_reports_everything_cached(tmp_path: Path) -> None:
    phrases = tone_list(tmp_path)
    code, out, _ = run_preload("--phrases", str(phrases), cache=tmp_path / "c")
    assert code == 0 and summary(out) == (8, 8, 0, 0)
    code, out, _ = run_preload("--phrases", str(phrases), "--workers", "3", cache=tmp_path / "c")
    assert code == 0 and summary(out) == (8, 0, 8, 0)


def test_dry_run_and_force(tmp_path: Path) -> None:
    phrases = tone_list(tmp_path, count=2)
    code, out, _ = run_preload("--phrases", str(phrases), "--dry-run", cache=tmp_path / "c")
    assert code == 0 and summary(out) == (6, 6, 0, 0)
    code, out, _ = run_preload("--phrases", str(phrases), cache=tmp_path / "c")
    assert summary(out) == (6, 6, 0, 0)  # the dry run generated nothing
    code, out, _ = run_preload("--phrases", str(phrases), "--force", cache=tmp_path / "c")
    assert code == 0 and summary(out) == (6, 6, 0, 0)


def test_failed_phrases_exit_1_and_are_counted(tmp_path: Path) -> None:
    phrases = write(
        tmp_path / "hot.json",
        {"voices": {"ok": "tone-low", "gone": "no-such-voice"},
         "phrases": [{"text": "hello", "voice": "ok"}, {"text": "lost", "voice": "gone", "seeds": [1, 2]}]},
    )  # fmt: skip
    code, out, err = run_preload("--phrases", str(phrases), cache=tmp_path / "c")
    assert code == 1 and summary(out) == (3, 1, 0, 2)
    # Each failure by the phrase's text and voice, in Chinese and English, then where and why.
    assert (
        "preload: 失败 failed: 「lost」（no-such-voice） · phrases[1]: "
        "音色 Voice：没有这个音色，请从列表中选择 — no saved or preset voice named 'no-such-voice'" in err
    )  # why in Chinese too, with the form's label for the field


@pytest.mark.parametrize(
    ("document", "fragments"),
    [
        ({"voices": A, "phrases": [{"text": "hi", "voice": "a", "seed": -1}]}, ["phrases[0]", "'seed'"]),
        ({"voices": A, "phrases": [{"text": "hi", "voice": "b"}]}, ["phrases[0]", '"voice"', "'b'"]),
        ({"voices": A, "phrases": [{"text": "", "voice": "a"}]}, ["phrases[0]", '"text"']),
        ({"voices": A, "phrases": [{"text": "x", "voice": "a", "speed": 5}]}, ["phrases[0]", "speed"]),
        ({"voices": A, "phrases": [{"text": "x", "voice": "a"}, {"text": "y", "voice": "a", "seeds": []}]},
         ["phrases[1]", "'seeds'"]),
        ({"voices": A, "phrases": [{"text": "x", "voice": "a", "colour": "red"}]}, ["phrases[0]", "colour"]),
        ({"voices": {"a": {"prompt_audio": "missing.wav"}}, "phrases": [{"text": "x", "voice": "a"}]},
         ["voices['a']", "prompt_audio", "'missing.wav' is not an audio file inside the phrase list's folder"]),
        ({"voices": {"a": {"preset": "x", "prompt_audio": "y"}}, "phrases": []}, ["voices['a']", "exactly one"]),
        ({"phrases": [{"text": "x", "voice": "a"}]}, ['"voices"']),
        ({"voices": A, "phrases": [{"text": "x", "voice": "a", "mode": "convert"}]},
         ["phrases[0]", '"mode"', "'convert' is not a mode", "instruct"]),
        ({"voices": A, "phrases": [{"text": "x", "voice": "a", "mode": "instruct"}]},
         ["phrases[0]", "'style'", "instruct mode needs a style"]),
        ({"voices": A, "phrases": [{"text": "x", "voice": "a", "mode": "instruct", "styles": ["开心", ""]}]},
         ["phrases[0]", "'styles'", "instruct mode needs a style"]),
    ],
)  # fmt: skip
def test_invalid_file_names_entry_and_field(tmp_path: Path, document: Any, fragments: list[str]) -> None:
    with pytest.raises(PhraseFileError) as caught:
        parse_phrases(document, base_dir=tmp_path)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_invalid_file_exits_2_with_message(tmp_path: Path) -> None:
    bad = write(
        tmp_path / "bad.json",
        {"voices": {"a": "tone-low"}, "phrases": [{"text": "x", "voice": "a", "seeds": [1, "two"]}]},
    )
    code, out, err = run_preload("--phrases", str(bad), cache=tmp_path / "c")
    assert code == 2 and out == ""
    assert "phrases[0]" in err and "'seeds'" in err and "'two'" in err
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    code, _, err = run_preload("--phrases", str(tmp_path / "broken.json"), cache=tmp_path / "c")
    assert code == 2 and "not valid JSON at line 1" in err


def test_prompt_audio_voices_are_relative_to_the_file(tmp_path: Path, testdata_dir: Path) -> None:
    (tmp_path / "voices").mkdir()
    (tmp_path / "voices" / "desk.wav").write_bytes((testdata_dir / "zh_female_prompt.wav").read_bytes())
    document = {
        "voices": {"desk": {"prompt_audio": "voices/desk.wav", "prompt_text": "希望你以后能够做的比我还好呦。"}},
        "phrases": [{"text": "欢迎光临", "voice": "desk", "styles": ["", "开心"]}],
    }
    requests = load_phrases(write(tmp_path / "hot.json", document))
    desk = str(tmp_path / "voices" / "desk.wav")
    assert [(r.prompt_audio, r.style) for r in requests] == [(desk, ""), (desk, "开心")]
    code, out, _ = run_preload("--phrases", str(tmp_path / "hot.json"), cache=tmp_path / "c")
    assert code == 0 and summary(out) == (2, 2, 0, 0)


def test_a_phrase_names_its_mode_and_is_preloaded_under_that_requests_key(tmp_path: Path) -> None:
    """An instruct phrase is the request the UI's instruct mode makes (its key differs
    from the same words and style in preset mode)."""
    document = {"voices": A, "phrases": [
        {"text": "欢迎光临！", "voice": "a", "mode": "instruct", "style": "开心"},
        {"text": "欢迎光临！", "voice": "a", "style": "开心"},
    ]}  # fmt: skip
    instruct, plain = parse_phrases(document, base_dir=tmp_path)
    assert (instruct.mode, plain.mode) == ("instruct", "")
    service = TTSService(load_config(env={}, overrides={"cache.dir": str(tmp_path / "c"), "engine": "tone"}))
    try:
        from lib.request.types import TTSRequest

        asked = TTSRequest(text="欢迎光临！", voice=instruct.voice, style="开心", mode="instruct")
        assert service.resolve(instruct.request()).key == service.resolve(asked).key
        assert service.resolve(plain.request()).key != service.resolve(asked).key
    finally:
        service.close()


def test_shipped_list_is_valid_and_uses_builtin_presets() -> None:
    requests = load_phrases(REPO / "hot_phrases.json")
    assert len(requests) >= 20
    assert {r.voice for r in requests} <= BUILTIN_PRESETS and {r.voice for r in requests} == BUILTIN_PRESETS
    texts = " ".join(r.text for r in requests)
    assert "请A023号顾客到3号窗口办理业务" in texts and "train" in texts


@pytest.mark.slow  # a killed process
def test_killed_midway_then_rerun_leaves_a_consistent_cache(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    phrases = write(
        tmp_path / "hot.json",
        {"voices": {"zh": "zh-female", "en": "en-male"},
         "phrases": [{"text": f"请A{i:03d}号顾客到{i % 9 + 1}号窗口办理业务", "voice": "zh"} for i in range(60)]
         + [{"text": f"Customer B{i:03d}, please go to counter {i % 9 + 1}.", "voice": "en"} for i in range(60)]},
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env["TTS_CACHE_LOCK_LEASE"] = "2"  # a killed holder blocks its key at most 2 s
    env["TTS_BUILTIN_BASE"] = "espeak"  # 120 phrases: Kokoro would take minutes
    command = [sys.executable, str(REPO / "preload_cache.py"), "--phrases", str(phrases), "--cache-dir", str(cache)]
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watcher = TTSService(load_config(env={}, overrides={"cache.dir": str(cache), "engine": "tone"}))
    try:
        while watcher.dashboard.snapshot(caller=LOCAL)["entries"] < 5:  # kill it once it is well under way
            assert proc.poll() is None, "the preload finished before it could be killed; give it more phrases"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        stored = watcher.dashboard.snapshot(caller=LOCAL)["entries"]
        assert 5 <= stored < 120
        lease = {"TTS_CACHE_LOCK_LEASE": "2"}
        code, out, err = run_preload("--phrases", str(phrases), cache=cache, engine="builtin", env=lease)
        assert code == 0, err
        n, generated, cached, failed = summary(out)
        assert (n, failed) == (120, 0) and cached == stored and generated == 120 - stored
        report = watcher.admin.verify(caller=LOCAL)
        assert report["corrupt_removed"] == 0 and report["checked"] == 120
        _, again, _ = run_preload("--phrases", str(phrases), cache=cache, engine="builtin", env=lease)
        assert summary(again) == (120, 0, 120, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
        watcher.close()
