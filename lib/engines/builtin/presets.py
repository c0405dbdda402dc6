"""The builtin engine's preset voices, per base.

espeak base: five espeak-ng voices (language and variant), as before Kokoro.

Kokoro base: the same five names keep working -- ``zh-female`` is Kokoro's zf_xiaoxiao,
``zh-male`` zm_yunjian, ``en-female`` af_heart, ``en-male`` am_michael (the voices prompt
voices are read in, see :data:`lib.engines.builtin.kokoro.render.BASE_VOICES`) -- and
``yue-female`` stays espeak-ng's Cantonese female voice (Kokoro has no Cantonese voice;
its audio is resampled to 24 kHz). Every installed Kokoro voice is also a preset named
``kokoro-<voice>``: ``kokoro-zf_xiaobei`` (``zf``/``zm`` Mandarin female/male,
``af``/``am`` American and ``bf``/``bm`` British English female/male). One voice reads a
whole text, Mandarin and English alike.
"""

from __future__ import annotations

import logging
from typing import NotRequired

from typing_extensions import TypedDict

from lib.errors import NotFoundError

__all__ = ["ESPEAK_PRESETS", "KOKORO_ALIASES", "KOKORO_PREFIX", "PresetParams", "preset_names", "preset_params"]

_LOGGER = logging.getLogger(__name__)

_FEMALE, _MALE = "f2", ""
#: name -> (espeak language of Han runs or None for the default, espeak variant)
ESPEAK_PRESETS: dict[str, tuple[str | None, str]] = {
    "zh-female": ("cmn", _FEMALE),
    "zh-male": ("cmn", _MALE),
    "en-female": (None, _FEMALE),
    "en-male": (None, _MALE),
    "yue-female": ("yue", _FEMALE),
}
#: Kokoro base: the espeak base's preset names that a Kokoro voice now speaks.
KOKORO_ALIASES = {"zh-female": "zf_xiaoxiao", "zh-male": "zm_yunjian", "en-female": "af_heart", "en-male": "am_michael"}
KOKORO_PREFIX = "kokoro-"


class PresetParams(TypedDict):
    """The profile params of a preset voice (:func:`preset_params`): a Kokoro voice, or
    an espeak language and variant."""

    preset: str
    """The preset's name."""
    kokoro: NotRequired[str]
    """The Kokoro voice that speaks it (Kokoro base)."""
    han: NotRequired[str | None]
    """espeak language of Han runs, None for the default (espeak voice)."""
    base: NotRequired[str]
    """espeak variant (espeak voice)."""


def preset_names(kokoro_voices: list[str] | None) -> list[str]:
    """Preset names of a base (``kokoro_voices`` None: the espeak base)."""
    names = sorted(ESPEAK_PRESETS)
    if kokoro_voices is not None:
        names += [KOKORO_PREFIX + v for v in sorted(kokoro_voices)]
    return names


def preset_params(name: str, kokoro_voices: list[str] | None) -> PresetParams:
    """The profile params of preset ``name``: ``kokoro`` names a Kokoro voice; otherwise
    ``han`` and ``base`` are the espeak language and variant."""
    if kokoro_voices is not None:
        voice = KOKORO_ALIASES.get(name) or (name.removeprefix(KOKORO_PREFIX) if name.startswith(KOKORO_PREFIX) else "")
        if voice in kokoro_voices:
            return {"preset": name, "kokoro": voice}
    if name in ESPEAK_PRESETS:
        han, variant = ESPEAK_PRESETS[name]
        return {"preset": name, "han": han, "base": variant}
    raise NotFoundError(f"unknown preset voice {name!r}; use one of {', '.join(preset_names(kokoro_voices))}")
