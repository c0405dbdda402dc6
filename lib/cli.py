"""The command-line flags every entry point shares, and the configuration they give.

``webui.py``, ``preload_cache.py`` and ``python -m lib.api`` add these flags with
:func:`add_config_flags` and build their configuration with :func:`config_from_args`:
built-in defaults < ``config.yaml`` (or ``--config``) < ``TTS_*`` variables < flags.

``run.sh`` asks this module (``python -m lib.cli prepare [webui flags]``) to create the
cache directory the app will use and to pick out the flags the preload shares, so the
list of flags lives here only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lib.config import AppConfig, default_config_path, load_config
from lib.errors import TTSError

__all__ = ["SHARED_FLAGS", "add_config_flags", "config_from_args", "main"]

#: Flags of webui.py that preload_cache.py takes too: (flag, dotted config key).
SHARED_FLAGS = (
    ("--config", None),
    ("--cache-dir", "cache.dir"),
    ("--engine", "engine"),
    ("--model-dir", "cosyvoice.model_dir"),
    ("--shared-url", "cache.shared_url"),
    ("--objects-url", "cache.objects_url"),
)
_HELP = {
    "--config": "config file (default: config.yaml if present)",
    "--cache-dir": "cache directory (cache.dir; default cosyvoice_cache)",
    "--engine": "builtin, cosyvoice or tone (engine)",
    "--model-dir": "CosyVoice model directory (cosyvoice.model_dir)",
    "--shared-url": "redis:// URL of the shared cache tier (cache.shared_url)",
    "--objects-url": "S3 URL endpoint/bucket/prefix of the object-store tier (cache.objects_url)",
}


def add_config_flags(parser: argparse.ArgumentParser, *, server: bool = False) -> None:
    """Add the shared flags (and ``--host``/``--port`` for servers)."""
    for flag, _ in SHARED_FLAGS:
        parser.add_argument(flag, help=_HELP[flag])
    if server:
        parser.add_argument("--host", help="interface to bind (server.host; default 127.0.0.1)")
        parser.add_argument("--port", type=int, help="TCP port (server.port; default 7860)")


def config_from_args(args: argparse.Namespace) -> AppConfig:
    """The configuration for parsed ``args``. Raises :class:`lib.errors.ConfigError`."""
    overrides: dict[str, object] = {}
    for flag, key in SHARED_FLAGS:
        if key is not None:
            overrides[key] = getattr(args, _dest(flag), None)
    for name in ("host", "port"):
        if hasattr(args, name):
            overrides[f"server.{name}"] = getattr(args, name)
    return load_config(default_config_path(getattr(args, "config", None)), overrides=overrides)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def main(argv: Sequence[str] | None = None) -> int:
    """``prepare [webui flags]``: create the cache directory (0700) and print, NUL
    separated, the flags the preload shares. Exit 2 on an invalid configuration."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "prepare":
        print("usage: python -m lib.cli prepare [webui.py flags]", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="lib.cli prepare", add_help=False)
    add_config_flags(parser)
    args, _rest = parser.parse_known_args(argv[1:])
    try:
        config = config_from_args(args)
        from lib.config.readings import load_lexicon

        load_lexicon(config.readings)  # a bad lexicon file stops run.sh here, naming its line
    except TTSError as exc:
        print(f"run.sh: {exc}", file=sys.stderr)
        return 2
    from lib.cache.diskutil import ensure_private_dir

    try:
        ensure_private_dir(config.cache.dir)
    except OSError as exc:
        print(f"run.sh: cannot create the cache directory {config.cache.dir}: {exc}", file=sys.stderr)
        return 2
    out: list[str] = []
    for flag, _ in SHARED_FLAGS:
        value = getattr(args, _dest(flag))
        if value is not None:
            out += [flag, value]
    sys.stdout.write("".join(f"{part}\0" for part in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
