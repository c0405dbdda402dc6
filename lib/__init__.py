"""The engine room of the voice-cloning TTS app: cached synthesis, engines, voices,
HTTP API and metrics. Public surface below; everything else is internal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "AppConfig",
    "SynthesisResult",
    "TTSError",
    "TTSRequest",
    "TTSService",
    "load_config",
    "synthesise_with_cache",
]

if TYPE_CHECKING:
    from lib.config import AppConfig, load_config
    from lib.errors import TTSError
    from lib.pipeline.results import SynthesisResult
    from lib.pipeline.service import TTSService, synthesise_with_cache
    from lib.request.types import TTSRequest

_WHERE = {
    "AppConfig": "lib.config",
    "load_config": "lib.config",
    "TTSError": "lib.errors",
    "TTSRequest": "lib.request.types",
    "SynthesisResult": "lib.pipeline.results",
    "TTSService": "lib.pipeline.service",
    "synthesise_with_cache": "lib.pipeline.service",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that ``import lib.config`` does not pull numpy, soundfile and diskcache.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(name)
