"""The CosyVoice engine (CosyVoice-300M, CosyVoice2, CosyVoice3) from local weights.

Importing this package costs nothing: torch and the CosyVoice code are imported when
:class:`CosyVoiceEngine` is constructed. See the CosyVoice section of ``README.md`` for installation.
"""

from __future__ import annotations

from lib.engines.cosyvoice.engine import CosyVoiceEngine
from lib.engines.cosyvoice.modeldir import FAMILIES, inspect_model_dir

__all__ = ["FAMILIES", "CosyVoiceEngine", "inspect_model_dir"]
