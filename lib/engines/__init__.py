"""Engines and the registry that picks one from configuration.

Each engine module is imported only when it is chosen, so that heavy dependencies
(torch, CosyVoice) cost nothing to a process that does not use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lib.config import ENGINE_NAMES
from lib.engines.base import MODES, PROMPT_SAMPLE_RATE, Engine, Synthesis, VoiceConverter, VoiceProfile
from lib.errors import ConfigError

if TYPE_CHECKING:
    from lib.config import AppConfig

__all__ = [
    "ENGINE_NAMES",
    "MODES",
    "PROMPT_SAMPLE_RATE",
    "Engine",
    "Synthesis",
    "VoiceConverter",
    "VoiceProfile",
    "create_engine",
]


def create_engine(config: AppConfig) -> Engine:
    """Build the engine named by ``config.engine``."""
    name = config.engine
    if name == "builtin":
        from lib.engines.builtin import BuiltinEngine

        builtin: Engine = BuiltinEngine(config.builtin, cache_dir=config.cache.dir)
        return builtin
    if name == "cosyvoice":
        from lib.engines.cosyvoice import CosyVoiceEngine

        cosy: Engine = CosyVoiceEngine(config.cosyvoice)
        return cosy
    if name == "tone":
        from lib.engines.tone import ToneEngine

        return ToneEngine()
    raise ConfigError(f"engine: unknown engine {name!r}; use one of {', '.join(ENGINE_NAMES)}")
