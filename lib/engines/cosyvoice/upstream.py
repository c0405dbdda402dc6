"""Adaptations of the CosyVoice code that are made in the engine, never in its files.

The upstream source is read-only here (and in production it is the operator's checkout),
so every incompatibility with this stack, and every behaviour that would break the cache's
determinism, is corrected from outside, on the loaded objects or around a call:

- **Qwen2 dtype** (:func:`qwen_in_float32`): upstream builds CosyVoice2/3's LLM with
  ``Qwen2ForCausalLM.from_pretrained(CosyVoice-BlankEN)`` and no dtype. It was written for
  transformers 4, which loads float32; transformers 5 loads the dtype named in the config
  (``bfloat16`` in the released models), and the float32 ``llm.pt`` weights loaded over it
  are then rounded to bfloat16 and the first forward fails ("mat1 and mat2 must have the same
  dtype"). During the load, the name is bound to a subclass that asks for float32.
- **Logging** (:func:`keep_logging`): ``cosyvoice.utils.file_utils`` calls
  ``logging.basicConfig(level=DEBUG)`` at import; the app's logging is restored afterwards.
- **Two random streams** (:class:`RandomStreams`): in upstream's streaming mode the LLM
  samples tokens in a thread while the main thread turns earlier tokens into audio, and
  CosyVoice2's HiFT draws its source phases and noise from the same global torch generator.
  The interleaving depends on timing, so the audio would too. The LLM's sampler and the
  model's ``token2wav`` are wrapped so that each draws from its own generator, seeded from
  the request's seed: the audio no longer depends on which thread ran first.
- **Chunk schedule** (:func:`reset_stream_schedule`): ``CosyVoice2Model.tts(stream=True)``
  doubles ``self.token_hop_len`` per chunk and never resets it, so a request's chunking
  (and audio) would depend on the requests before it; it is reset before every call.
- **Abandoned streams** (:func:`wind_down`): a stream closed mid-way leaves upstream's LLM
  thread running; it is stopped and its leftovers dropped before the next request.
- **Code identity** (:func:`code_identity`): the commit of a git checkout, else a digest of
  the code itself, so that a different CosyVoice code gives different cache keys.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "RandomStreams",
    "code_identity",
    "keep_logging",
    "normaliser_of",
    "qwen_in_float32",
    "reset_stream_schedule",
    "v3_cross_lingual",
    "wind_down",
]

_LOGGER = logging.getLogger(__name__)


@contextlib.contextmanager
def keep_logging() -> Iterator[None]:
    """Undo what an import does to the root logger (handlers, level)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


@contextlib.contextmanager
def qwen_in_float32(torch: Any) -> Iterator[bool]:
    """While loading, make upstream's ``Qwen2ForCausalLM.from_pretrained`` load float32
    weights; yields whether there was anything to adapt (the code has a Qwen2 LLM)."""
    module: Any = sys.modules.get("cosyvoice.llm.llm")
    original: Any = getattr(module, "Qwen2ForCausalLM", None)
    if original is None:
        yield False
        return

    class Float32Qwen2(original):  # type: ignore[misc]
        @classmethod
        def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
            if "dtype" not in kwargs and "torch_dtype" not in kwargs:
                kwargs["dtype"] = torch.float32
            return original.from_pretrained(*args, **kwargs)

    module.Qwen2ForCausalLM = Float32Qwen2
    try:
        yield True
    finally:
        module.Qwen2ForCausalLM = original


def reset_stream_schedule(model: Any, hop: int | None) -> None:
    """Put upstream's streaming chunk size back to its initial value (see the module doc)."""
    if hop is not None and hasattr(model, "token_hop_len"):
        model.token_hop_len = hop


class RandomStreams:
    """Separate random streams for the LLM's sampler and for the vocoder path.

    Each wrapped call swaps its stream's state into torch's global CPU generator, runs, and
    swaps it out again, under one lock: every draw of a synthesis happens inside one of the
    wrapped calls, so each stream sees the same sequence of draws whatever the threads'
    timing. (CUDA generators are not swapped: on a GPU the LLM samples on the CPU generator
    too, and the CUDA kernels of the flow and vocoder draw from their own per-device state.)
    """

    NAMES = ("llm", "vocoder")

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._lock = threading.Lock()
        self._states: dict[str, Any] = {}
        self._stop_id: int | None = None
        self.installed = False
        self.stopping = False
        """Set while an abandoned stream is wound down: the sampler answers end-of-speech."""

    def seed(self, seed: int) -> None:
        """Start both streams from ``seed`` (call under the engine lock, before a request)."""
        for index, name in enumerate(self.NAMES):
            generator = self._torch.Generator().manual_seed((int(seed) * 2 + index) % (2**63))
            self._states[name] = generator.get_state()

    def install(self, model: Any) -> bool:
        """Wrap ``model.llm.sampling`` and ``model.token2wav``; False if either is missing."""
        llm = getattr(model, "llm", None)
        if (
            llm is None
            or not callable(getattr(llm, "sampling", None))
            or not callable(getattr(model, "token2wav", None))
        ):
            return False
        llm.sampling = self._wrap("llm", llm.sampling)
        model.token2wav = self._wrap("vocoder", model.token2wav)
        self._stop_id = getattr(llm, "speech_token_size", None)
        self.installed = True
        return True

    def _wrap(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        torch = self._torch

        def run(*args: Any, **kwargs: Any) -> Any:
            if name == "llm" and self.stopping and self._stop_id is not None:
                return self._stop_id  # the first stop token: the LLM loop ends cleanly
            with self._lock:
                outside = torch.get_rng_state()
                state = self._states.get(name)
                if state is not None:
                    torch.set_rng_state(state)
                try:
                    return func(*args, **kwargs)
                finally:
                    self._states[name] = torch.get_rng_state()
                    torch.set_rng_state(outside)

        run.__wrapped__ = func  # type: ignore[attr-defined]
        return run


def wind_down(model: Any, streams: RandomStreams | None, timeout: float = 600.0) -> None:
    """After a streaming call was abandoned (a client went away, an error), wait for
    upstream's LLM thread and drop the per-call state it leaves behind.

    ``model.tts(stream=True)`` runs the LLM in a thread and only cleans up after its loop; a
    generator closed mid-way leaves the thread sampling (from the LLM's random stream, which
    the next request would then share) and its entries in the model's dicts. The sampler is
    told to answer end-of-speech, so the thread ends at its next token."""
    ends = getattr(model, "llm_end_dict", None)
    if not ends:
        return
    if streams is not None:
        streams.stopping = True
    try:
        deadline = time.monotonic() + timeout
        while not all(ends.values()) and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        if streams is not None:
            streams.stopping = False
    for attr in ("tts_speech_token_dict", "llm_end_dict", "mel_overlap_dict", "hift_cache_dict", "flow_cache_dict"):
        table = getattr(model, attr, None)
        if isinstance(table, dict):
            table.clear()


def normaliser_of(frontend: Any) -> str:
    """Which text normaliser the frontend really runs. Upstream picks ``ttsfrd`` if it loads
    (its resources are not public), else ``wetext`` if importable, else none (and records
    the choice in ``text_frontend``); cosyvoice-minicpmo has no normaliser at all."""
    chosen = getattr(frontend, "text_frontend", None)
    if isinstance(chosen, str):
        return chosen or "none"
    if getattr(frontend, "use_ttsfrd", False):  # older upstream code: a flag
        return "ttsfrd"
    return "none"


_V3_PROMPT = "You are a helpful assistant.<|endofprompt|>"


def v3_cross_lingual(
    cosy: Any,
    text: str,
    spk_id: str,
    common: dict[str, Any],
    normalise: Callable[..., Any] | None,
    rearm: Callable[[], None],
) -> Iterator[dict[str, Any]]:
    """CosyVoice3 wants its system prompt in front of cross-lingual text, but upstream's
    ``text_normalize`` skips normalisation *and* sentence splitting of any text holding
    ``<|``: so the text is normalised and split here, and each segment is spoken with the
    prompt in front and the frontend off. ``rearm`` puts a fresh copy of the speaker's
    features in the table before every call after the first."""
    segments = list(normalise(text, split=True, text_frontend=True)) if normalise is not None else [text]
    plain = {**common, "text_frontend": False}
    for index, segment in enumerate(segments):
        if index:
            rearm()
        yield from cosy.inference_cross_lingual(f"{_V3_PROMPT}{segment}", None, zero_shot_spk_id=spk_id, **plain)


# --- which code is running -------------------------------------------------------------------


def _git_commit(repo: Path) -> str | None:
    """HEAD's commit of a git checkout at ``repo`` (plain files only: no git binary needed)."""
    git = repo / ".git"
    if git.is_file():  # a worktree or submodule: "gitdir: PATH"
        text = git.read_text(encoding="utf-8", errors="replace").strip()
        if not text.startswith("gitdir:"):
            return None
        git = (repo / text.split(":", 1)[1].strip()).resolve()
    head = git / "HEAD"
    if not head.is_file():
        return None
    ref = head.read_text(encoding="utf-8", errors="replace").strip()
    if not ref.startswith("ref:"):
        return ref if len(ref) == 40 else None
    name = ref.split(":", 1)[1].strip()
    loose = git / name
    if loose.is_file():
        return loose.read_text(encoding="utf-8", errors="replace").strip() or None
    packed = git / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == name:
                return parts[0]
    return None


def _tree_digest(roots: list[Path]) -> str:
    """sha256 over the relative path and content of every .py/.yaml/.tiktoken file."""
    total = hashlib.sha256()
    for root in roots:
        if not root.is_dir():
            continue
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".yaml", ".tiktoken"))
        for path in files:
            if "__pycache__" in path.parts:
                continue
            total.update(f"{root.name}/{path.relative_to(root).as_posix()}\x00".encode())
            total.update(hashlib.sha256(path.read_bytes()).digest())
    return total.hexdigest()


def code_identity(source: str, cli_file: str, repo_dir: Path | None) -> str:
    """What identifies the CosyVoice code that runs: ``<source>[@commit|-version]#<digest>``,
    the digest over the cosyvoice and matcha packages as loaded (``.py``, ``.yaml`` and the
    tokenizer's ``.tiktoken`` files), the commit when the source is a git checkout."""
    package = Path(cli_file).resolve().parents[1]  # .../cosyvoice
    roots = [package]
    # Located, not imported (whether matcha is imported yet depends on what ran before).
    matcha = importlib.util.find_spec("matcha")
    if matcha is not None and matcha.origin:
        roots.append(Path(matcha.origin).resolve().parent)
    label = source
    if source == "upstream" and repo_dir is not None:
        commit = _git_commit(repo_dir)
        if commit is not None:
            label += f"@{commit[:12]}"
    elif source == "minicpmo":
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            label += "-" + importlib.metadata.version("cosyvoice-minicpmo")
    # The digest decides (a checkout with local edits is different code); the commit or
    # version is there for people reading the model version's parts.
    return f"{label}#{_tree_digest(roots)[:16]}"
