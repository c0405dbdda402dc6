"""Configuration: ``config.yaml``, ``TTS_*`` variables and flags read once into frozen,
typed, validated objects (:mod:`lib.config.app`), one module per section that has its own
rules. The package's names are :mod:`lib.config.app`'s."""

from __future__ import annotations

from lib.config import app as _app
from lib.config.app import *  # noqa: F403 - the package's names are the module's (its __all__)

__all__ = list(_app.__all__)
