"""Gradio's files kept private: the copies it makes of every result, download and
upload live in a 0700 folder of the service, not in the shared ``$TMPDIR/gradio``.

Gradio copies each file a handler returns (audio, the exported ``hot_phrases.json``) and
each file a browser uploads (prompts, phrase lists) into its cache folder,
``GRADIO_TEMP_DIR`` or else ``$TMPDIR/gradio``: shared by every program on the machine,
folders 0755, files named after the start of the user's text, never removed.
:func:`private_gradio_dir` points ``GRADIO_TEMP_DIR`` (read by Gradio when a Blocks,
its components and its app are made) at ``gradio/`` inside the service's result folder
(:class:`lib.audio.files.ResultFiles`: made by ``mkdtemp``, 0700, removed by
``TTSService.close()`` at shutdown), and sets the process umask to 077 so that every
folder and file Gradio makes there is 0700/0600 too.

Download names keep the readable form the UI promises
(``zh-female_请A023号..._seed0_d1e30d.wav``): inside a 0700 folder no other local user
can list or open them, and over HTTP a file is reached only through the URL handed to
the session that made it (its folder is the hash of its content).

``GRADIO_TEMP_DIR`` is one per process: the app built last owns it (one app per process
in production; tests build one at a time).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from lib.audio.files import ResultFiles

__all__ = ["GRADIO_TEMP_ENV", "private_gradio_dir"]

_LOGGER = logging.getLogger(__name__)

GRADIO_TEMP_ENV = "GRADIO_TEMP_DIR"
_PRIVATE_UMASK = 0o077


def private_gradio_dir(files: ResultFiles) -> Path:
    """Make Gradio keep its files in a private folder of ``files``; call before the
    Blocks is built. Returns the folder."""
    folder = files.subdir("gradio")
    os.umask(_PRIVATE_UMASK)
    os.environ[GRADIO_TEMP_ENV] = str(folder)
    _LOGGER.info("web UI files in %s (0700, removed at shutdown)", folder)
    return folder
