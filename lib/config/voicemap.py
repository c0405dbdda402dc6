"""OpenAI's built-in voice names, mapped onto this app's voices (``openai.voices``).

OpenAI clients offer alloy, ash, ballad, coral, echo, fable, onyx, nova, sage, shimmer,
verse, marin and cedar, and many send one of them whatever the server. Each name is
mapped to a voice of this app (a preset or a saved voice) by a table: the shipped
default picks, per engine, a preset of the name's register (OpenAI describes coral,
marin, nova, sage and shimmer as female voices, the others male or neutral); entries
in ``openai.voices`` replace single names, e.g. ``nova: front desk``.

A mapped request is the request in that voice: same key, same cached audio.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lib.errors import ConfigError

__all__ = ["OPENAI_VOICES", "OpenAIConfig", "default_voices"]

#: OpenAI's built-in voices and their register (True: female).
_REGISTER = {
    "alloy": False,
    "ash": False,
    "ballad": False,
    "coral": True,
    "echo": False,
    "fable": False,
    "onyx": False,
    "nova": True,
    "sage": True,
    "shimmer": True,
    "verse": False,
    "marin": True,
    "cedar": False,
}
OPENAI_VOICES = tuple(_REGISTER)

#: Per engine: the preset a female and a male OpenAI voice is spoken in.
_PRESETS = {
    "builtin": ("en-female", "en-male"),
    "tone": ("tone-high", "tone-low"),
    "cosyvoice": ("中文女", "中文男"),  # CosyVoice-300M-SFT's speakers; other models need openai.voices
}


def default_voices(engine: str) -> dict[str, str]:
    """The shipped table for ``engine`` ({} for an engine without one)."""
    presets = _PRESETS.get(engine)
    if presets is None:
        return {}
    return {name: presets[0] if female else presets[1] for name, female in _REGISTER.items()}


@dataclass(frozen=True)
class OpenAIConfig:
    """The OpenAI-compatible API (``openai:``)."""

    voices: Mapping[str, str] = field(default_factory=dict, hash=False)
    """OpenAI voice name -> a voice of this app (preset or saved), replacing the
    shipped default for that name; names not given keep the default."""

    def __post_init__(self) -> None:
        for name, voice in self.voices.items():
            if not name.strip() or not voice.strip():
                raise ConfigError(f"openai.voices.{name}: give a voice name (a preset or a saved voice)")

    def table(self, engine: str) -> dict[str, str]:
        """The effective table for ``engine``: the default, with the configured names over it."""
        return {**default_voices(engine), **{k.strip(): v.strip() for k, v in self.voices.items()}}
