"""The web UI's convert mode (变声 Convert, issue 12 item 3) driven through its Gradio API
with ``gradio_client``, against the real app served by uvicorn: real recordings converted
by the builtin engine into saved and preset voices, through the same cache as the
service; bad input refused with the field's bilingual message and nothing cached; the
mode offered only by engines that can convert. The browser's view is in test_browser.py."""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from conftest import serving
from gradio_client import Client, handle_file

import webui
from lib.config import AppConfig, load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import ConvertRequest
from lib.ui.handlers import Handlers


def _config(cache: Path, engine: str) -> AppConfig:
    return load_config(env={}, overrides={"cache.dir": str(cache), "engine": engine, "builtin.base": "espeak"})


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TTSService]:
    svc = TTSService(_config(tmp_path / "cache", "builtin"))
    yield svc
    svc.close()


@pytest.fixture
def client(service: TTSService, free_port: int, tmp_path: Path) -> Iterator[Client]:
    with serving(webui.create_app(service), free_port) as url:
        yield Client(url, verbose=False, download_files=str(tmp_path / "downloads"))


_FORM: dict[str, Any] = {
    "source": None, "prompt_audio": None, "voice": None, "seed": 0, "speed": 1.0, "fmt": "wav", "use_cache": True,
}  # fmt: skip


def _convert(client: Client, **over: Any) -> tuple[str, str, str]:
    """(audio path, badge HTML, details Markdown) of one conversion through the UI's API."""
    audio, badge, details, _notice = client.predict(*{**_FORM, **over}.values(), api_name="/convert")
    return audio, badge, details


def _key(details: str) -> str:
    return details.split("`")[1]


def _md5(path: str | Path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_recording_converted_into_a_saved_voice_misses_then_hits(
    client: Client, service: TTSService, testdata_dir: Path, tmp_path: Path
) -> None:
    """The UI's answer is the service's answer to the same ConvertRequest: the same key,
    and the same bytes as another service (its own cache) makes from scratch."""
    female, male = testdata_dir / "zh_female_prompt.wav", testdata_dir / "male_prompt.wav"
    service.voices.save("desk", str(female), caller=LOCAL)
    first_audio, first_badge, first_details = _convert(client, source=handle_file(str(male)), voice="desk")
    second_audio, second_badge, second_details = _convert(client, source=handle_file(str(male)), voice="desk")
    assert 'data-cache="MISS"' in first_badge and 'data-cache="HIT"' in second_badge
    assert _md5(first_audio) == _md5(second_audio)
    key = _key(first_details)
    assert key == _key(second_details)
    request = ConvertRequest(source_audio=str(male), voice="desk")
    assert service.resolve(request).key == key
    here = service.convert(request)
    assert (here.cache, here.key) == ("HIT", key) and here.wav == Path(first_audio).read_bytes()
    other = TTSService(_config(tmp_path / "other", "builtin"))
    try:
        other.voices.save("desk", str(female), caller=LOCAL)
        fresh = other.convert(request)
    finally:
        other.close()
    assert (fresh.cache, fresh.key) == ("MISS", key)
    assert fresh.wav == Path(first_audio).read_bytes()  # made, not looked up: bit-identical
    pcm, rate = sf.read(first_audio, dtype="int16")
    assert rate == fresh.sample_rate and abs(len(pcm) / rate - fresh.duration) < 0.01
    assert float(np.abs(pcm.astype(np.float64)).mean()) > 100  # speech, not silence


@pytest.mark.slow
def test_a_preset_target_and_an_uploaded_target(client: Client, service: TTSService, testdata_dir: Path) -> None:
    """A preset from the list, then a recorded target (which wins over the list, as in
    the clone modes): two different keys, each the service's; mp3 is served too."""
    female, male = testdata_dir / "zh_female_prompt.wav", testdata_dir / "male_prompt.wav"
    audio, badge, details = _convert(client, source=handle_file(str(female)), voice="en-male", fmt="mp3", seed=3)
    assert 'data-cache="MISS"' in badge and audio.endswith(".mp3")
    preset_key = service.resolve(ConvertRequest(source_audio=str(female), voice="en-male", seed=3, format="mp3")).key
    assert _key(details) == preset_key
    _, badge, details = _convert(
        client, source=handle_file(str(female)), prompt_audio=handle_file(str(male)), voice="en-male"
    )
    assert 'data-cache="MISS"' in badge
    upload_key = service.resolve(ConvertRequest(source_audio=str(female), prompt_audio=str(male))).key
    assert _key(details) == upload_key != preset_key


def _wav(seconds: float, amplitude: float = 0.3) -> bytes:
    t = np.arange(int(16000 * seconds)) / 16000
    out = io.BytesIO()
    sf.write(out, (amplitude * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 16000, format="WAV")
    return out.getvalue()


def test_bad_input_is_refused_at_the_field_and_nothing_is_cached(
    free_port: int, tmp_path: Path, testdata_dir: Path
) -> None:
    engine = ToneEngine()
    svc = TTSService(_config(tmp_path / "cache", "tone"), engine)
    files = {"long.wav": _wav(31.0), "silent.wav": _wav(3.0, 0.0), "notes.wav": b"these are not audio samples " * 40}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    male = handle_file(str(testdata_dir / "male_prompt.wav"))
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"voice": "tone-low"}, "源录音 Source recording：请上传或录制要变声的源录音",
         "upload or record the recording to convert"),
        ({"source": male}, "参考音频 Prompt audio：请上传或录制目标音色",
         "upload or record the target voice, or pick a preset or saved voice"),
        ({"source": handle_file(str(tmp_path / "long.wav")), "voice": "tone-low"},
         "源录音 Source recording：源录音长 31.0 秒，请剪到 30 秒以内", "source audio is 31.0 s long; trim it"),
        ({"source": handle_file(str(tmp_path / "silent.wav")), "voice": "tone-low"},
         "源录音 Source recording：源录音几乎没有声音", "source audio is silent"),
        ({"source": handle_file(str(tmp_path / "notes.wav")), "voice": "tone-low"},
         "源录音 Source recording：源录音无法读取为音频", "source audio is not decodable audio"),
        ({"source": male, "voice": "nobody"}, "音色 Voice：没有这个音色", "no saved or preset voice named 'nobody'"),
        ({"source": male, "voice": "tone-low", "speed": 5}, "语速 Speed：5 超出范围", "5 is out of range"),
    ]  # fmt: skip
    try:
        with serving(webui.create_app(svc), free_port) as url:
            client = Client(url, verbose=False, download_files=str(tmp_path / "downloads"))
            for form, chinese, english in cases:
                with pytest.raises(Exception, match="failed validation") as refused:
                    _convert(client, **form)
                shown = str(refused.value)
                assert chinese in shown and english in shown, (form, shown)
                assert "prompt audio is" not in shown and "/gradio/" not in shown, shown
            # The same problems reach the handler itself (an event without the validator).
            handlers = Handlers(svc, webui.DEFAULT_PHRASES)
            with pytest.raises(Exception, match=r"源录音长 31\.0 秒"):
                handlers.convert(str(tmp_path / "long.wav"), None, "tone-low", 0, 1.0, "wav", True, None, None)  # type: ignore[arg-type]
        assert engine.calls == 0
        svc.cache.flush()
        assert svc.cache.store.stats()["entries"] == 0
    finally:
        svc.close()


class _CannotConvert(ToneEngine):
    converts = False  # e.g. CosyVoice whose model has no inference_vc


class _NoConverter(ToneEngine):
    convert = None  # type: ignore[assignment]


def _mode_choices(svc: TTSService) -> list[str]:
    """The mode radio's values, as built for ``svc`` (inside a running event loop, as
    webui.create_app builds it: outside one Gradio leaves event loops open)."""

    async def build() -> Any:
        return webui.build_demo(svc)

    demo = asyncio.run(build())
    radios = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "mode"]
    assert len(radios) == 1
    return [value for _, value in radios[0].choices]


@pytest.mark.parametrize("engine_class", [ToneEngine, _CannotConvert, _NoConverter])
def test_the_mode_is_offered_only_when_the_engine_converts(tmp_path: Path, engine_class: type[ToneEngine]) -> None:
    svc = TTSService(_config(tmp_path / "cache", "tone"), engine_class())
    try:
        choices = _mode_choices(svc)
    finally:
        svc.close()
    assert set(choices) - {"convert"} == set(ToneEngine().modes)
    assert ("convert" in choices) is (engine_class is ToneEngine)
