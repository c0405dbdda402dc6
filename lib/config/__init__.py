"""Configuration: ``config.yaml``, ``TTS_*`` variables and flags read once into frozen,
typed, validated objects (:mod:`lib.config.app`), one module per section that has its own
rules. The package's names are :mod:`lib.config.app`'s."""

from __future__ import annotations

from lib.config.app import (
    ENGINE_NAMES,
    MAX_TTL,
    AppConfig,
    BuiltinConfig,
    CacheConfig,
    CosyVoiceConfig,
    OpenAIConfig,
    PreloadConfig,
    PromptConfig,
    ProvenanceConfig,
    ReadingsConfig,
    SegmentsConfig,
    ServerConfig,
    TemplatesConfig,
    TextConfig,
    VoicesConfig,
    WatchdogConfig,
    default_config_path,
    load_config,
    parse_size,
)

__all__ = [
    "ENGINE_NAMES",
    "MAX_TTL",
    "AppConfig",
    "BuiltinConfig",
    "CacheConfig",
    "CosyVoiceConfig",
    "OpenAIConfig",
    "PreloadConfig",
    "PromptConfig",
    "ProvenanceConfig",
    "ReadingsConfig",
    "SegmentsConfig",
    "ServerConfig",
    "TemplatesConfig",
    "TextConfig",
    "VoicesConfig",
    "WatchdogConfig",
    "default_config_path",
    "load_config",
    "parse_size",
]
