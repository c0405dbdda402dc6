"""Phrase lists may only use recordings inside their own folder or preload.prompt_dir,
refused paths and missing files get one message, and expansion is capped
(lib/request/phrases.py); the same rules in preload_cache.py and the UI's Preload tab."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from conftest import REPO, preload_main, serving
from gradio_client import Client, handle_file

import webui
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.phrases import MAX_FILE_BYTES, PhraseFileError, PhraseRules, load_phrases, parse_phrases


def recording(path: Path, hz: float = 180.0) -> Path:
    t = np.arange(32_000) / 16_000
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32), 16_000)
    return path


def listing(folder: Path, prompt: str, **extra: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"voices": {"v": {"prompt_audio": prompt}}, "phrases": [{"text": "hello", "voice": "v", **extra}]}
    path = folder / "hot.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def refusal(path: Path, rules: PhraseRules | None = None) -> str:
    with pytest.raises(PhraseFileError) as caught:
        load_phrases(path, rules)
    return str(caught.value).split('field "prompt_audio": ', 1)[1]


def test_recordings_inside_the_lists_folder_are_used(tmp_path: Path) -> None:
    inside = recording(tmp_path / "list" / "voices" / "desk.wav")
    for given in ("voices/desk.wav", "./voices/../voices/desk.wav", str(inside)):
        requests = load_phrases(listing(tmp_path / "list", given))
        assert [r.prompt_audio for r in requests] == [str(inside.resolve())]


def test_paths_outside_are_refused_with_the_message_of_a_missing_file(tmp_path: Path) -> None:
    secret = recording(tmp_path / "elsewhere" / "secret.wav")
    folder = tmp_path / "list"
    folder.mkdir()
    os.symlink(secret, folder / "link.wav")  # a symlink out of the folder
    os.symlink(tmp_path / "elsewhere", folder / "linked-dir")
    messages = {
        given: refusal(listing(folder, given))
        for given in (
            str(secret),
            "../elsewhere/secret.wav",
            "link.wav",
            "linked-dir/secret.wav",
            "missing.wav",
            "/etc/passwd",
            "/no/such/file.wav",
            ".",
        )
    }
    shapes = {re.sub(r"^'.*?' ", "", m) for m in messages.values()}
    assert len(shapes) == 1, messages  # exists or not, outside or missing: the same words
    assert shapes.pop() == "is not an audio file inside the phrase list's folder; give a path relative to the list"
    assert all("secret.wav" not in m or m.startswith(("'../elsewhere", "'/", "'linked-dir")) for m in messages.values())


def test_preload_prompt_dir_is_a_second_root(tmp_path: Path) -> None:
    shared = recording(tmp_path / "prompts" / "desk.wav")
    path = listing(tmp_path / "list", "desk.wav")
    assert "preload.prompt_dir" not in refusal(path)
    rules = PhraseRules(prompt_dir=str(tmp_path / "prompts"))
    assert [r.prompt_audio for r in load_phrases(path, rules)] == [str(shared.resolve())]
    assert "or preload.prompt_dir" in refusal(listing(tmp_path / "list", "../prompts/nope.wav"), rules)


def test_an_uploaded_list_may_not_use_its_own_folder(tmp_path: Path) -> None:
    recording(tmp_path / "upload" / "beside.wav")  # e.g. another user's upload next to it
    path = listing(tmp_path / "upload", "beside.wav")
    assert "none is configured" in refusal(path, PhraseRules(own_folder=False))
    prompts = tmp_path / "prompts"
    recording(prompts / "beside.wav")
    rules = PhraseRules(prompt_dir=str(prompts), own_folder=False)
    assert [r.prompt_audio for r in load_phrases(path, rules)] == [str((prompts / "beside.wav").resolve())]


def test_expansion_is_capped_before_it_is_built(tmp_path: Path) -> None:
    doc = {"voices": {"a": "tone-low"}, "phrases": [{"text": "x", "voice": "a", "seeds": list(range(100)),
                                                      "styles": ["s"] * 100}]}  # fmt: skip
    assert len(parse_phrases(doc, base_dir=tmp_path, rules=PhraseRules(max_requests=10_000))) == 10_000
    with pytest.raises(PhraseFileError, match=r"more than 9999 requests \(preload.max_requests"):
        parse_phrases(doc, base_dir=tmp_path, rules=PhraseRules(max_requests=9_999))
    # A million seeds times a million styles is refused at once, not built.
    huge = {"voices": {"a": "tone-low"}, "phrases": [{"text": "x", "voice": "a", "seeds": list(range(3000)),
                                                       "styles": ["s"] * 3000}]}  # fmt: skip
    with pytest.raises(PhraseFileError, match=r"phrases\[0\]: the list expands to more than 10000"):
        parse_phrases(huge, base_dir=tmp_path)
    many = {"voices": {"a": "tone-low"}, "phrases": [{"text": f"t{i}", "voice": "a"} for i in range(10_001)]}
    with pytest.raises(PhraseFileError, match=r"phrases\[10000\]"):
        parse_phrases(many, base_dir=tmp_path)


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(PhraseFileError, match="over 16 MB"):
        load_phrases(path)


def test_the_shipped_list_still_loads_under_the_rules() -> None:
    requests = load_phrases(REPO / "hot_phrases.json", PhraseRules())
    assert len(requests) >= 20 and all(r.prompt_audio is None for r in requests)


def test_preload_cache_applies_the_configured_rules(tmp_path: Path) -> None:
    recording(tmp_path / "prompts" / "desk.wav")
    path = listing(tmp_path / "list", "desk.wav", seeds=[0, 1, 2])
    args = ("--phrases", str(path), "--cache-dir", str(tmp_path / "c"), "--engine", "tone", "--dry-run")
    code, _, err = preload_main(*args)
    assert code == 2 and "is not an audio file inside the phrase list's folder" in err
    code, _, err = preload_main(*args, env={"TTS_PRELOAD_PROMPT_DIR": str(tmp_path / "prompts")})
    assert code == 0, err
    code, _, err = preload_main(*args, env={"TTS_PRELOAD_PROMPT_DIR": str(tmp_path / "prompts"),
                                            "TTS_PRELOAD_MAX_REQUESTS": "2"})  # fmt: skip
    assert code == 2 and "preload.max_requests" in err


@pytest.fixture
def ui(tmp_path: Path, free_port: int) -> Iterator[tuple[Client, TTSService]]:
    prompts = tmp_path / "prompts"
    recording(prompts / "desk.wav", hz=240.0)
    config = load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "cache"),
                                            "voices.prewarm": False, "preload.prompt_dir": str(prompts)})  # fmt: skip
    service = TTSService(config, ToneEngine())
    shipped = listing(tmp_path / "shipped", "voices/own.wav")
    recording(tmp_path / "shipped" / "voices" / "own.wav")
    try:
        with serving(webui.create_app(service, phrases_path=shipped), free_port) as url:
            yield Client(url, verbose=False, download_files=str(tmp_path / "downloads")), service
    finally:
        service.close()


def test_ui_preload_upload_goes_through_the_same_checks(ui: tuple[Client, TTSService], tmp_path: Path) -> None:
    client, service = ui
    assert "1 generated" in client.predict(None, False, "", api_name="/preload")  # the shipped list: its own folder
    secret = recording(tmp_path / "secret" / "x.wav")
    for given in (str(secret), "../../secret/x.wav", "/etc/passwd", "own.wav"):
        upload = listing(tmp_path / f"up{abs(hash(given))}", given)
        with pytest.raises(Exception, match=r"inside preload\.prompt_dir") as caught:
            client.predict(handle_file(str(upload)), False, "", api_name="/preload")
        assert "x.wav" not in str(caught.value) or given.endswith("x.wav")
    ok = listing(tmp_path / "up-ok", "desk.wav")  # in preload.prompt_dir
    assert "1 generated" in client.predict(handle_file(str(ok)), False, "", api_name="/preload")
    capped = tmp_path / "up-big" / "hot.json"
    capped.parent.mkdir()
    capped.write_text(
        json.dumps(
            {
                "voices": {"a": "tone-low"},
                "phrases": [
                    {"text": "x", "voice": "a", "seeds": list(range(200)), "styles": [str(i) for i in range(100)]}
                ],
            }
        )
    )
    with pytest.raises(Exception, match=r"preload\.max_requests"):
        client.predict(handle_file(str(capped)), False, "", api_name="/preload")
    assert service.engine.calls == 2  # type: ignore[attr-defined]
