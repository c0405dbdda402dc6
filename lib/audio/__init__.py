"""Audio in and out: prompts decoded (:mod:`.pcm`), results encoded (:mod:`.encoders`,
:mod:`.resample`), labelled (:mod:`.provenance`, :mod:`.tagging`) and kept as files
(:mod:`.files`); the memo of decoded prompts (:mod:`.promptmemo`)."""

from __future__ import annotations

__all__ = ["PROMPT_SAMPLE_RATE"]

#: Sample rate of the canonical prompt PCM every engine receives (mono int16).
PROMPT_SAMPLE_RATE = 16_000
