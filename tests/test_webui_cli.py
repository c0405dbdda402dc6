"""``webui.py``'s command line and ``config.yaml``: the scripts' ``main`` in this process (the runs
end before it would serve), ``lib.cli prepare`` as run.sh runs it; caches under ``tmp_path``."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import REPO, run_script

from lib.config import AppConfig, load_config
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest


def run_webui(*args: str, env_extra: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``webui.py ARGS`` by its ``main`` in this process (:func:`conftest.run_script`): the
    runs here end before it would serve."""
    return run_script("webui", *args, env=env_extra)


def test_clear_cache_clears_reports_and_exits(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    svc = TTSService(load_config(env={}, overrides={"cache.dir": str(cache), "engine": "tone"}))
    for seed in range(3):
        svc.synthesise(TTSRequest(text="欢迎光临", voice="tone-low", seed=seed))
    svc.close()
    code, out, err = run_webui("--clear-cache", "--engine", "tone", "--cache-dir", str(cache))
    assert code == 0, err
    assert f"cleared 3 entries from {cache}" in out
    svc = TTSService(load_config(env={}, overrides={"cache.dir": str(cache), "engine": "tone"}))
    try:
        assert svc.dashboard.snapshot(caller=LOCAL)["entries"] == 0
    finally:
        svc.close()


def test_bad_configuration_fails_at_start_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("cache:\n  size_limt: 1GiB\n", encoding="utf-8")
    code, _, err = run_webui("--config", str(bad), "--clear-cache")
    assert code == 2 and "cache.size_limt: unknown key" in err
    code, _, err = run_webui("--clear-cache", "--cache-dir", str(tmp_path / "c"), env_extra={"TTS_ENGINE": "nope"})
    assert code == 2 and "engine: must be one of" in err


def test_flags_override_environment_which_overrides_the_file(tmp_path: Path) -> None:
    file = tmp_path / "config.yaml"
    file.write_text("engine: tone\ncache:\n  dir: from-file\nserver:\n  port: 7000\n", encoding="utf-8")
    env = {"TTS_CACHE_DIR": "from-env", "TTS_SERVER_PORT": "7100"}
    config = load_config(file, env=env, overrides={"server.port": 7200, "cache.dir": None})
    assert (config.engine, config.cache.dir, config.server.port) == ("tone", "from-env", 7200)


def test_config_yaml_documents_every_key_with_its_default() -> None:
    text = (REPO / "config.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert load_config(REPO / "config.yaml", env={}) == AppConfig()
    lines = text.splitlines()
    for f in dataclasses.fields(AppConfig):
        value = getattr(AppConfig(), f.name)
        keys = [f.name] if not dataclasses.is_dataclass(value) else [s.name for s in dataclasses.fields(value)]
        section = data if not dataclasses.is_dataclass(value) else data[f.name]
        for key in keys:
            assert key in section, f"config.yaml lacks {f.name}.{key}"
            at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
            assert lines[at - 1].strip().startswith("#"), f"{key} in config.yaml has no comment above it"


def _flags(helptext: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", helptext)) - {"--help"}


def test_webui_and_preload_share_the_documented_flags() -> None:
    _, helptext, _ = run_webui("--help")
    assert _flags(helptext) == {"--config", "--host", "--port", "--cache-dir", "--engine", "--model-dir",
                                "--shared-url", "--objects-url", "--clear-cache", "--preload"}  # fmt: skip
    assert "Precedence" in helptext
    _, preload, _ = run_script("preload_cache", "--help")
    assert _flags(preload) == {"--phrases", "--config", "--cache-dir", "--engine", "--model-dir",
                               "--shared-url", "--objects-url", "--workers", "--dry-run", "--force",
                               "--verify", "--server", "--token"}  # fmt: skip


def test_run_sh_hands_the_shared_flags_to_the_preload(tmp_path: Path) -> None:
    """``./run.sh --model-dir DIR --engine E`` (and the other shared flags) reach
    preload_cache.py; the cache directory is created private; UI-only flags stay behind."""
    cache = tmp_path / "c"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    done = subprocess.run(
        [sys.executable, "-m", "lib.cli", "prepare", "--port", "9999", "--engine", "tone", "--model-dir",
         str(tmp_path / "m"), "--cache-dir", str(cache), "--host", "0.0.0.0"],
        cwd=REPO, env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split("\0")[:-1] == [
        "--cache-dir", str(cache), "--engine", "tone", "--model-dir", str(tmp_path / "m")
    ]  # fmt: skip
    assert cache.is_dir() and (cache.stat().st_mode & 0o777) == 0o700
    bad = subprocess.run(
        [sys.executable, "-m", "lib.cli", "prepare", "--engine", "nope"], cwd=REPO, env=env, capture_output=True,
        timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and b"engine: must be one of" in bad.stderr
