"""Importing and loading the CosyVoice code, from either source, safely.

Two sources of the code are supported:

- an upstream checkout (``cosyvoice.repo_dir``): put on ``sys.path`` together with its
  ``third_party/Matcha-TTS``; it has ``AutoModel`` and CosyVoice2/3 with their LLMs, and
  reads prompt audio from a *path* with torchaudio (which now needs torchcodec), so the
  frontend's ``load_wav`` is replaced by one that serves in-memory PCM;
- the PyPI package ``cosyvoice-minicpmo``: takes prompt audio as a 16 kHz tensor, never
  loads ``llm.pt`` (it leaves a random LLM in train mode, which we fix here), has no
  text normaliser, and its CosyVoice2 has no LLM at all (refused with a clear message).

Safety: every ``snapshot_download`` reachable from the loaded modules is replaced by a
function that raises, so a hub download can never start even if a check is missed.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import itertools
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.cosyvoice.modeldir import ModelDir, obtain_hint
from lib.engines.cosyvoice.upstream import RandomStreams, code_identity, keep_logging, qwen_in_float32
from lib.errors import EngineUnavailableError

__all__ = ["INSTALL_HINT", "Runtime", "load_runtime"]

_LOGGER = logging.getLogger(__name__)

INSTALL_HINT = (
    "install the CosyVoice stack into the app's virtual environment with `bash tests/install_cosyvoice.sh` "
    "(CPU torch==2.13.0, cosyvoice-minicpmo and the pinned packages of requirements-cosyvoice.txt), or set "
    "cosyvoice.repo_dir to an upstream CosyVoice checkout; see the CosyVoice section of README.md. "
    "To run without it, start with --engine builtin"
)


_WAVS: dict[str, NDArray[Any]] = {}
_WAV_IDS = itertools.count(1)


class DownloadRefusedError(RuntimeError):
    """Raised in place of any hub download the CosyVoice code attempts."""


def _refuse_download(*args: Any, **kwargs: Any) -> Any:
    target = args[0] if args else kwargs.get("model_id") or kwargs.get("repo_id")
    raise DownloadRefusedError(
        f"refusing to download {target!r}: the cosyvoice engine only loads local models. " + obtain_hint()
    )


@dataclass
class Runtime:
    """The imported CosyVoice code and what differs between its sources."""

    source: str
    """``upstream`` (a checkout), ``minicpmo`` (the PyPI package) or ``installed`` (another install)."""
    cli: Any
    """The ``cosyvoice.cli.cosyvoice`` module."""
    set_seed: Callable[[int], None]
    """CosyVoice's own ``set_all_random_seed``."""
    torch: Any
    code: str = ""
    """Identity of the code (source, commit or version, digest); part of the model version."""
    wav_registry: dict[str, NDArray[Any]] = field(default_factory=lambda: _WAVS)
    """In-memory prompt PCM (float32, 16 kHz) served to a path-reading frontend by key. One
    per process: every engine on the same code shares the frontend module it is served by."""

    @property
    def has_auto_model(self) -> bool:
        return hasattr(self.cli, "AutoModel")

    def prompt_key(self, pcm: NDArray[Any]) -> str:
        """Register ``pcm`` and return the pseudo path the patched ``load_wav`` serves it by."""
        key = f"<memory:prompt-{next(_WAV_IDS)}>.wav"  # itertools.count: atomic under the GIL
        self.wav_registry[key] = pcm
        return key

    def load(self, model: ModelDir, *, fp16: bool) -> Any:
        """Build the CosyVoice object for ``model`` (already checked complete)."""
        family = model.family
        if self.source == "minicpmo" and family.key != "300m":
            raise EngineUnavailableError(
                f"{model.path} is a {family.models} model, but the installed cosyvoice-minicpmo package has no "
                "LLM for it (its CosyVoice2 only decodes speech tokens), so it cannot do text-to-speech. Set "
                "cosyvoice.repo_dir to an upstream CosyVoice checkout, or use a CosyVoice-300M model."
            )
        path = str(model.path)
        try:
            with keep_logging(), qwen_in_float32(self.torch):
                cosy = self._build(model, path, fp16)
        except DownloadRefusedError as exc:
            raise EngineUnavailableError(str(exc)) from exc
        _neutralise_downloads()  # loading the yaml imported more modules
        self._fix_llm(cosy, model)
        self._patch_frontend(cosy)
        return cosy

    def _build(self, model: ModelDir, path: str, fp16: bool) -> Any:
        family = model.family
        if self.has_auto_model:
            return self.cli.AutoModel(model_dir=path, load_trt=False, fp16=fp16)
        cls = getattr(self.cli, family.class_name, None)
        if cls is None:
            raise EngineUnavailableError(
                f"the installed CosyVoice code has no {family.class_name} class for {path}; set "
                "cosyvoice.repo_dir to a recent upstream CosyVoice checkout"
            )
        return cls(path, fp16=fp16)

    def random_streams(self, cosy: Any) -> RandomStreams | None:
        """Separate random streams for the LLM sampler and the vocoder path of ``cosy``
        (see :class:`RandomStreams`), or None when the model lacks the hooks."""
        streams = RandomStreams(self.torch)
        return streams if streams.install(cosy.model) else None

    def _fix_llm(self, cosy: Any, model: ModelDir) -> None:
        """cosyvoice-minicpmo skips ``llm.pt`` and leaves the LLM in train mode (dropout on):
        random, non-deterministic speech. A module still in train mode was never loaded."""
        llm = getattr(cosy.model, "llm", None)
        if llm is None:
            raise EngineUnavailableError(
                f"the CosyVoice code ({self.source}) built no LLM for {model.path}, so it cannot do text-to-speech; "
                "set cosyvoice.repo_dir to an upstream CosyVoice checkout"
            )
        if llm.training:
            device = cosy.model.device
            state = self.torch.load(str(model.path / "llm.pt"), map_location=device, weights_only=True)
            llm.load_state_dict(state, strict=True)
            llm.to(device).eval()
            _LOGGER.info("loaded llm.pt into the LLM (the %s code does not)", self.source)

    def _patch_frontend(self, cosy: Any) -> None:
        """Upstream's frontend reads prompt audio from a path via torchaudio.load; give it a
        loader that serves registered in-memory PCM (and reads real files with soundfile)."""
        module = sys.modules.get(type(cosy.frontend).__module__)
        if module is None or not hasattr(module, "load_wav"):
            return
        torch, registry = self.torch, self.wav_registry

        def load_wav(wav: Any, target_sr: int, min_sr: int = 16000) -> Any:
            if isinstance(wav, str) and wav in registry:
                data, rate = registry[wav], 16_000
            else:
                import soundfile

                data, rate = soundfile.read(wav, dtype="float32", always_2d=True)
                data = data.mean(axis=1)
            speech = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32)).unsqueeze(0)
            if rate != target_sr:
                import torchaudio.functional

                speech = torchaudio.functional.resample(speech, orig_freq=rate, new_freq=target_sr)
            return speech

        setattr(module, "load_wav", load_wav)  # noqa: B010 - a module attribute mypy cannot see

    @property
    def path_prompts(self) -> bool:
        """True when the frontend takes prompt audio as a path (upstream) rather than a tensor."""
        frontend = sys.modules.get("cosyvoice.cli.frontend")
        return frontend is not None and hasattr(frontend, "load_wav")


def _source(repo_dir: Path | None, cli: Any) -> str:
    where = Path(cli.__file__).resolve()
    if repo_dir is not None and repo_dir.resolve() in where.parents:
        return "upstream"
    try:
        dist = importlib.metadata.distribution("cosyvoice-minicpmo")
    except importlib.metadata.PackageNotFoundError:
        return "installed"
    package = Path(str(dist.locate_file("cosyvoice"))).resolve()
    return "minicpmo" if package in where.parents else "installed"


def _neutralise_downloads() -> None:
    """Replace ``snapshot_download`` in every loaded CosyVoice/Matcha module and in
    modelscope itself, so no code path can reach a hub."""
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        if name.split(".")[0] in ("cosyvoice", "matcha", "modelscope") and hasattr(module, "snapshot_download"):
            with contextlib.suppress(AttributeError, TypeError):
                setattr(module, "snapshot_download", _refuse_download)  # noqa: B010


_IMPORT_LOCK = threading.Lock()


def load_runtime(repo_dir: str | None, device: str) -> Runtime:
    """Import torch and the CosyVoice code; raise :class:`EngineUnavailableError` with the
    install command when they are missing."""
    with _IMPORT_LOCK:
        repo = Path(os.path.expanduser(repo_dir)) if repo_dir else None
        if repo is not None:
            if not (repo / "cosyvoice" / "cli" / "cosyvoice.py").is_file():
                raise EngineUnavailableError(
                    f"cosyvoice.repo_dir {repo} is not a CosyVoice checkout (no cosyvoice/cli/cosyvoice.py); "
                    "clone https://github.com/FunAudioLLM/CosyVoice with --recursive, or unset repo_dir to use "
                    "the installed cosyvoice-minicpmo package"
                )
            loaded = sys.modules.get("cosyvoice")
            if loaded is not None and repo.resolve() not in Path(loaded.__file__ or ".").resolve().parents:
                raise EngineUnavailableError(
                    f"another cosyvoice package ({loaded.__file__}) is already imported; cosyvoice.repo_dir "
                    f"{repo} can only be used in a fresh process"
                )
            for extra in (repo / "third_party" / "Matcha-TTS", repo):
                if str(extra) not in sys.path:
                    sys.path.insert(0, str(extra))
        # Belt and braces against hub access from transformers/huggingface_hub; tqdm bars
        # from the inference loops would only clutter the server log.
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TQDM_DISABLE"):
            os.environ.setdefault(var, "1")
        if device == "cpu" and "torch" not in sys.modules:
            # CosyVoice picks CUDA by itself whenever it sees it; hiding the GPU is the only
            # way to keep it on the CPU.
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        try:
            torch = importlib.import_module("torch")
            with keep_logging():  # upstream's file_utils calls logging.basicConfig(DEBUG) at import
                cli = importlib.import_module("cosyvoice.cli.cosyvoice")
                common = importlib.import_module("cosyvoice.utils.common")
        except ImportError as exc:
            raise EngineUnavailableError(
                f"the cosyvoice engine cannot import {exc.name or exc}: {INSTALL_HINT}"
            ) from exc
        if device == "cuda" and not torch.cuda.is_available():
            raise EngineUnavailableError("cosyvoice.device is cuda, but torch sees no CUDA device; use cpu or auto")
        if device == "cpu" and torch.cuda.is_available():
            _LOGGER.warning(
                "cosyvoice.device is cpu, but torch was imported before the engine and sees CUDA; "
                "CosyVoice will use the GPU"
            )
        _neutralise_downloads()
        source = _source(repo, cli)
        code = code_identity(source, str(cli.__file__), repo)
        _LOGGER.info("cosyvoice code: %s (%s)", code, cli.__file__)
        return Runtime(source=source, cli=cli, set_seed=common.set_all_random_seed, torch=torch, code=code)


def marker_added_by(func: Any, marker: str) -> bool:
    """Whether ``func`` (a frontend method) appends ``marker`` itself: code versions differ,
    and a doubled or missing end-of-prompt marker changes what the LLM hears."""
    try:
        return marker in inspect.getsource(func)
    except (OSError, TypeError):
        return False


def accepts(func: Any, name: str) -> bool:
    """Whether ``func`` takes a parameter ``name`` (older upstream code lacks some)."""
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
