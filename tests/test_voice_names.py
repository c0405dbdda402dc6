"""Voice names that look like another voice are refused (lib/voices/names.py): NFKC
first, one alphabet per name, and no name whose TR39-style skeleton is that of a preset
or saved voice. Over the real HTTP API with the built-in engine's presets (en-female,
zh-female, ...) and a real voice library under ``tmp_path``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import in_process

from lib.api import create_app
from lib.config import load_config
from lib.pipeline.service import TTSService
from lib.voices.names import confusable_with, folded, mixed_scripts, normalise_name, skeleton


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = TTSService(
        load_config(env={}, overrides={"cache.dir": str(tmp_path), "voices.prewarm": False}), admin_token="t"
    )
    yield svc
    svc.close()


@pytest.fixture
def http(service: TTSService, testdata_dir: Path) -> Iterator[httpx.Client]:
    speech = (testdata_dir / "male_prompt.wav").read_bytes()
    with in_process(create_app(service)) as client:
        client.speech = speech  # type: ignore[attr-defined]
        client.timeout = 60  # seconds: httpx and httpx2 (starlette >= 1.10) alike
        yield client


def save(http: httpx.Client, name: str, **headers: str) -> httpx.Response:
    upload = {"prompt_audio": ("v.wav", http.speech, "audio/wav")}  # type: ignore[attr-defined]
    return http.post("/api/voices", data={"name": name}, files=upload, headers=headers)


def test_skeletons_meet_for_look_alikes_and_only_for_them() -> None:
    for a, b in [("еn-female", "en-female"), ("ｅｎ-female", "en-female"), ("ﬁona", "fiona"), ("corn", "com"),
                 ("voice1", "voicel"), ("tone-l0w", "tone-lOw"), ("ѕаlе", "sale")]:  # fmt: skip
        assert skeleton(a) == skeleton(b), (a, b)
    for a, b in [("desk", "desk2"), ("en-female", "En-female"), ("张三", "张四"), ("al", "ai")]:
        assert skeleton(a) != skeleton(b), (a, b)
    assert confusable_with("еn-female", ["zh-female", "en-female"]) == "en-female"
    assert confusable_with("en-female", ["en-female"]) is None  # itself is no look-alike
    assert normalise_name(" ｅｎ-ﬁle ") == "en-file"
    assert folded("EN_Female") == folded("en-female") == folded("en.female") != folded("en-females")
    assert confusable_with("Desk 1", ["desk-1"]) == "desk-1" and confusable_with("desk", ["desk2"]) is None


def test_mixed_alphabets_are_found_but_cjk_may_join_one() -> None:
    assert mixed_scripts("pаypal") == ["Cyrillic", "Latin"]
    assert mixed_scripts("αβγ-x") == ["Greek", "Latin"]
    for fine in ("desk 1", "Ирина-2", "张三 voice", "日本語テスト desk", "서울 desk"):
        assert mixed_scripts(fine) == [], fine


@pytest.mark.parametrize(
    ("name", "status", "alike"),
    [
        ("еn-female", 422, None),  # Cyrillic е among Latin letters: mixed alphabets
        ("ｅｎ-female", 409, "preset voice 'en-female'"),  # fullwidth: NFKC makes it the preset's name
        ("zh-fernale", 409, "preset voice 'zh-female'"),  # rn for m
        ("Ꭼn-female", 422, None),  # Cherokee Ꭼ among Latin letters
        ("EN-FEMALE", 409, "preset voice 'en-female'"),  # case
        ("En-female", 409, "preset voice 'en-female'"),
        ("en_female", 409, "preset voice 'en-female'"),  # separator
        ("zh-Female", 409, "preset voice 'zh-female'"),
        ("nova", 409, "'nova' is an OpenAI voice name"),  # /v1 speaks it in a preset
        ("Alloy", 409, "'alloy' is an OpenAI voice name"),
    ],
    ids=["cyrillic-e", "fullwidth", "rn-for-m", "cherokee", "upper", "capital", "underscore", "zh-capital",
         "openai-nova", "openai-alloy"],
)
def test_look_alikes_of_presets_are_refused_naming_them(
    http: httpx.Client, service: TTSService, name: str, status: int, alike: str | None
) -> None:
    refused = save(http, name)
    assert refused.status_code == status, refused.text
    message = refused.json()["error"]
    assert message.startswith(f"voice name {name!r}")
    assert (alike in message) if alike else ("mixes" in message and "one alphabet" in message)
    assert service.voices.library.names() == []


def test_look_alikes_of_saved_voices_are_refused_and_names_are_saved_normalised(
    http: httpx.Client, service: TTSService
) -> None:
    assert save(http, "ﬁona").status_code == 201  # the ligature is saved as the letters
    assert service.voices.library.names() == ["fiona"]
    for look_alike in ("fiona", "ｆｉｏｎａ", "fіona"):  # the same, fullwidth, Cyrillic і
        refused = save(http, look_alike)
        assert refused.status_code in (409, 422), refused.text
    assert "saved voice 'fiona'" in save(http, "ｆｉｏｎａ").json()["error"]
    assert "is taken" in save(http, "fiona").json()["error"]
    assert save(http, "张三 voice").status_code == 201 and save(http, "Ирина").status_code == 201
    assert sorted(service.voices.library.names()) == ["fiona", "Ирина", "张三 voice"]
    # The admin replacing a voice under its own name is not refused as its own look-alike.
    replaced = http.post(
        "/api/voices", data={"name": "fiona", "replace": "true"},
        files={"prompt_audio": ("v.wav", http.speech)}, headers={"Authorization": "Bearer t"},  # type: ignore[attr-defined]
    )  # fmt: skip
    assert replaced.status_code == 201, replaced.text
