"""The CosyVoice model directory: which family it holds, whether it is complete, and its
fingerprint (the engine's model version).

Nothing here imports torch or the CosyVoice code, so a bad directory is reported in
milliseconds and before any upstream code could fall back to ``snapshot_download``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from lib.errors import EngineUnavailableError

__all__ = ["FAMILIES", "Family", "ModelDir", "fingerprint", "inspect_model_dir", "obtain_hint"]

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    """One CosyVoice model generation, told apart by the name of its config file."""

    key: str
    """Short name used in the model version (``300m``, ``v2``, ``v3``)."""
    config: str
    """Config file name: its presence decides the family."""
    class_name: str
    """Class in ``cosyvoice.cli.cosyvoice`` that loads it."""
    tokenizer: str
    """Speech tokenizer ONNX file."""
    needs_qwen: bool
    """Whether the LLM is built on the ``CosyVoice-BlankEN`` Qwen config in the directory."""
    models: str
    """Released model names, for messages and docs."""

    @property
    def required(self) -> tuple[str, ...]:
        """Files that must exist before any upstream code sees the directory."""
        files: tuple[str, ...] = (self.config, "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", self.tokenizer)
        if self.needs_qwen:
            files += ("CosyVoice-BlankEN/config.json", "CosyVoice-BlankEN/vocab.json", "CosyVoice-BlankEN/merges.txt")
        return files


FAMILIES: tuple[Family, ...] = (
    Family("300m", "cosyvoice.yaml", "CosyVoice", "speech_tokenizer_v1.onnx", False,
           "CosyVoice-300M, CosyVoice-300M-SFT, CosyVoice-300M-Instruct, CosyVoice-300M-25Hz"),
    Family("v2", "cosyvoice2.yaml", "CosyVoice2", "speech_tokenizer_v2.onnx", True, "CosyVoice2-0.5B"),
    Family("v3", "cosyvoice3.yaml", "CosyVoice3", "speech_tokenizer_v3.onnx", True, "Fun-CosyVoice3-0.5B-2512"),
)  # fmt: skip

#: Files hashed into the fingerprint besides the required ones, when present.
_OPTIONAL = ("spk2info.pt",)
_QWEN_DIR = "CosyVoice-BlankEN"


def obtain_hint() -> str:
    """How to get weights onto a machine that cannot download them."""
    return (
        "Nothing is downloaded at run time: on a machine with internet, fetch a model, e.g. "
        "`modelscope download --model iic/CosyVoice-300M --local_dir CosyVoice-300M` or "
        "`huggingface-cli download FunAudioLLM/CosyVoice2-0.5B --local-dir CosyVoice2-0.5B`, copy the "
        "directory here and point cosyvoice.model_dir (or --model-dir) at it; see the CosyVoice section of README.md."
    )


def _expected() -> str:
    return "; ".join(f"{f.config} ({f.models}) with {', '.join(f.required[1:])}" for f in FAMILIES)


@dataclass(frozen=True)
class ModelDir:
    """A checked model directory."""

    path: Path
    """As configured (not resolved: CosyVoice reads ``-Instruct`` from the name)."""
    family: Family
    instruct: bool
    """True for an ``-Instruct`` model (300M-Instruct): preset voice + instruction."""

    @property
    def has_speakers(self) -> bool:
        return (self.path / "spk2info.pt").is_file()

    def files(self) -> list[Path]:
        """The files whose content decides the audio: config, weights, speaker table."""
        found = [self.path / name for name in self.family.required + _OPTIONAL if (self.path / name).is_file()]
        qwen = self.path / _QWEN_DIR
        if self.family.needs_qwen and qwen.is_dir():
            found += [p for p in qwen.rglob("*") if p.is_file() and p not in found]
        return sorted(set(found))


def inspect_model_dir(model_dir: str | os.PathLike[str] | None) -> ModelDir:
    """Detect the family and check completeness; raises :class:`EngineUnavailableError`
    with one message naming the directory, the files expected and how to obtain them."""
    if model_dir is None:
        raise EngineUnavailableError(
            "the cosyvoice engine needs a model directory: set cosyvoice.model_dir in config.yaml, "
            f"TTS_COSYVOICE_MODEL_DIR or --model-dir. Expected one of: {_expected()}. {obtain_hint()}"
        )
    path = Path(os.path.expanduser(os.fspath(model_dir)))
    if not path.is_dir():
        raise EngineUnavailableError(
            f"CosyVoice model directory {path} does not exist. Expected a directory holding one of: "
            f"{_expected()}. {obtain_hint()}"
        )
    family = next((f for f in FAMILIES if (path / f.config).is_file()), None)
    if family is None:
        raise EngineUnavailableError(
            f"CosyVoice model directory {path} holds no cosyvoice.yaml, cosyvoice2.yaml or cosyvoice3.yaml, so "
            f"its model family is unknown. Expected one of: {_expected()}. {obtain_hint()}"
        )
    missing = [name for name in family.required if not (path / name).is_file() or (path / name).stat().st_size == 0]
    if missing:
        raise EngineUnavailableError(
            f"CosyVoice model directory {path} is incomplete: {family.config} marks a {family.models} model, "
            f"but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing or empty (expected: "
            f"{', '.join(family.required)}). {obtain_hint()}"
        )
    return ModelDir(path=path, family=family, instruct="-Instruct" in str(path))


# --- fingerprint ---------------------------------------------------------------------------

_MEMO_LOCK = threading.Lock()
_MEMO: dict[str, dict[str, object]] = {}
"""In-process memo: absolute path -> {"size", "mtime_ns", "sha256"}."""


def default_memo_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "voice-tts" / "cosyvoice-fingerprints.json"


def _load_memo(memo_file: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(memo_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        _LOGGER.warning("ignoring unreadable fingerprint memo %s (%s)", memo_file, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _save_memo(memo_file: Path, data: dict[str, dict[str, object]]) -> None:
    # Written atomically: two processes starting together must not leave a torn file.
    try:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo_file.parent, prefix=".fp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, sort_keys=True, indent=0)
        os.replace(tmp, memo_file)
    except OSError as exc:
        _LOGGER.warning("cannot write fingerprint memo %s (%s); the model is re-hashed next start", memo_file, exc)


def _file_digest(path: Path, memo: dict[str, dict[str, object]]) -> tuple[str, bool]:
    """sha256 of ``path``, from the memo when size and mtime are unchanged; the flag says
    whether it was computed now."""
    stat = path.stat()
    key = str(path.resolve())
    known = memo.get(key)
    if known and known.get("size") == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
        return str(known["sha256"]), False
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    memo[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    return digest, True


def fingerprint(model: ModelDir, variant: str, memo_file: str | os.PathLike[str] | None = None) -> str:
    """Short digest of the model's config and weight files plus ``variant`` (what else
    changes the audio: the code source, the text frontend, the -Instruct flag).

    Each file's sha256 is remembered by (path, size, mtime) in memory and in
    ``memo_file``, so only a changed file is hashed again.
    """
    target = Path(memo_file) if memo_file is not None else default_memo_file()
    with _MEMO_LOCK:
        memo = _MEMO if _MEMO else _load_memo(target)
        total = hashlib.sha256(f"{model.family.key}\x00{variant}".encode())
        changed = False
        for file in model.files():
            digest, fresh = _file_digest(file, memo)
            changed = changed or fresh
            total.update(f"\x00{file.relative_to(model.path).as_posix()}\x00{digest}".encode())
        if changed or not target.exists():
            merged = {**_load_memo(target), **memo}
            _save_memo(target, merged)
            memo = merged
        _MEMO.clear()
        _MEMO.update(memo)
    return total.hexdigest()[:12]
