"""Kokoro-82M (Apache-2.0) as the built-in engine's base voice (``builtin.base: kokoro``).

Modules by role:

- :mod:`.install`: where the model parts (PyPI) and voice files (npm ``kokoro-js``) are;
  whether the install is complete (cheap; at engine construction);
- :mod:`.model`: the ONNX graph joined, hash-checked and loaded once per process;
- :mod:`.voices`: the voice style vectors, hash-checked;
- :mod:`.vocab`, :mod:`.english`, :mod:`.phonemes`: a :class:`lib.text.Reading` in
  Kokoro's phonemes (Mandarin by misaki's v1.0 rules, English through espeak-ng IPA);
- :mod:`.render`: sentences to trimmed 24 kHz audio.

:func:`resolve_base` decides the base at engine construction: ``kokoro`` when asked for
and installed, else ``espeak`` with one warning that says how to install the rest.
"""

from __future__ import annotations

import logging
import threading

from lib.engines.builtin.kokoro.install import Install, find_install, install_hint

__all__ = ["BASES", "resolve_base"]

_LOGGER = logging.getLogger(__name__)

#: Values of ``builtin.base``.
BASES = ("kokoro", "espeak")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def resolve_base(base: str, voices_dir: str | None) -> tuple[str, Install | None]:
    """``("kokoro", install)`` when ``base`` is ``kokoro`` and all of it is installed;
    else ``("espeak", None)``, with one warning per process (per missing set) when
    Kokoro was asked for but is incomplete."""
    if base == "espeak":
        return "espeak", None
    install, missing = find_install(voices_dir)
    if install is not None:
        return "kokoro", install
    message = (
        "builtin.base is kokoro but its install is incomplete (missing: " + "; ".join(missing) + "): "
        "the builtin engine speaks with the espeak base. To install the rest, " + install_hint() + ". "
        "To choose espeak and silence this warning, set builtin.base: espeak (TTS_BUILTIN_BASE=espeak)."
    )
    with _warned_lock:
        first = message not in _warned
        _warned.add(message)
    if first:
        _LOGGER.warning("%s", message)
    return "espeak", None
