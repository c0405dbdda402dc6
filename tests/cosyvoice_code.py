"""Which CosyVoice code a test process imports: the installed package or the upstream source.

The CosyVoice-300M tests run the installed ``cosyvoice-minicpmo`` package; the CosyVoice2/3
tests need the upstream source (``../shared/upstream/CosyVoice`` beside the repository, or
``$TTS_COSYVOICE_UPSTREAM``). Both are the top-level package ``cosyvoice``, so a process can
hold only one at a time: these helpers drop the loaded ``cosyvoice``/``matcha`` modules and
fix ``sys.path`` before a test module builds its engines. (Engines already built keep the
modules they were built with.) The app itself never switches: ``cosyvoice.repo_dir`` in a
process that already imported another CosyVoice is refused.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "stack_missing", "upstream_dir", "upstream_missing", "use_installed", "use_upstream"]


def upstream_dir() -> Path:
    """The upstream source: ``$TTS_COSYVOICE_UPSTREAM``, else ``../shared/upstream/CosyVoice``
    relative to the repository root (the same place on developers' machines and in CI)."""
    override = os.environ.get("TTS_COSYVOICE_UPSTREAM")
    return Path(override) if override else ROOT.parent / "shared" / "upstream" / "CosyVoice"


def upstream_missing() -> str | None:
    repo = upstream_dir()
    if not (repo / "cosyvoice" / "cli" / "cosyvoice.py").is_file():
        return (
            f"the upstream CosyVoice source is not at {repo} (set TTS_COSYVOICE_UPSTREAM to a checkout "
            "of FunAudioLLM/CosyVoice with third_party/Matcha-TTS)"
        )
    return None


def stack_missing() -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as exc:
            return f"CosyVoice stack not installed ({exc}); run: bash tests/install_cosyvoice.sh"
    return None


def _where(module: object) -> str | None:
    where = getattr(module, "__file__", None)
    if where:
        return str(where)
    try:  # a namespace package (no __init__.py): its path is computed from the parent package
        return next(iter(list(getattr(module, "__path__", []) or [])), None)
    except (KeyError, TypeError):
        return None


def _drop(keep_under: Path | None) -> None:
    # Decide for every module first: a namespace package's path is recomputed through its
    # parent, which must still be in sys.modules.
    names = [name for name in sys.modules if name.split(".")[0] in ("cosyvoice", "matcha")]
    doomed = []
    for name in names:
        where = _where(sys.modules[name])
        inside = where is not None and keep_under is not None and keep_under in Path(where).resolve().parents
        if not inside:
            doomed.append(name)
    for name in doomed:
        del sys.modules[name]


def _upstream_paths(repo: Path) -> list[str]:
    return [str(repo), str(repo / "third_party" / "Matcha-TTS")]


def use_upstream(repo: Path | None = None) -> Path:
    """Make ``import cosyvoice`` resolve to the upstream source in this process."""
    repo = (repo or upstream_dir()).resolve()
    _drop(keep_under=repo)
    for path in reversed(_upstream_paths(repo)):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    return repo


def use_installed() -> None:
    """Make ``import cosyvoice`` resolve to the installed package again."""
    repo = upstream_dir().resolve()
    for path in _upstream_paths(repo):
        while path in sys.path:
            sys.path.remove(path)
    loaded = sys.modules.get("cosyvoice")
    if loaded is not None and repo in Path(str(loaded.__file__)).resolve().parents:
        _drop(keep_under=None)
