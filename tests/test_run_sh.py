"""``./run.sh`` from a fresh clone: creates .venv, installs requirements.txt (pip's own
download cache makes this about a minute), creates the cache directory 0700, serves the
UI and preloads the shipped hot phrases beside it with the builtin engine; a second start
skips the install and finds the phrases cached; a preload that fails leaves the UI serving."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO

from lib.compose.templates import load_templates
from lib.request.phrases import load_phrases

pytestmark = pytest.mark.slow


def start(clone: Path, log: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            ["./run.sh", *args], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_serving(proc: subprocess.Popen[bytes], url: str, log: Path, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"run.sh exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            page = httpx.get(url, timeout=2)
            if page.status_code == 200:
                return page.text
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"run.sh did not serve {url} in {seconds:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


def wait_preloaded(proc: subprocess.Popen[bytes], url: str, log: Path, seconds: float) -> dict[str, Any]:
    """The start-up preload's status (``GET /api/preload``) once it has ended."""
    deadline = time.monotonic() + seconds
    status: dict[str, Any] = {}
    while time.monotonic() < deadline and proc.poll() is None:
        status = httpx.get(url + "api/preload", timeout=5).json()
        if status["state"] not in ("loading", "running"):
            return status
        time.sleep(0.5)
    pytest.fail(f"the preload did not end in {seconds:.0f} s ({status}):\n{log.read_text(errors='replace')[-3000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_fresh_clone_sets_up_preloads_and_serves(tmp_path: Path, free_port: int) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TTS_", "VIRTUAL_ENV"))}
    env["TTS_CACHE_DIR"] = str(cache)
    # run.sh installs the Kokoro base (its wheels and voices are asserted below), but the
    # preload of the whole list runs on the espeak base: Kokoro would take minutes here.
    env["TTS_BUILTIN_BASE"] = "espeak"
    url = f"http://127.0.0.1:{free_port}/"
    # Every phrase, and every piece of the list's templates, is one preloaded request.
    phrases = len(load_phrases(clone / "hot_phrases.json"))
    phrases += sum(len(t.pieces()) for t in load_templates(clone / "hot_phrases.json"))

    log = tmp_path / "first.log"
    proc = start(clone, log, env, "--port", str(free_port))
    try:
        page = wait_serving(proc, url, log, seconds=170)
        status = wait_preloaded(proc, url, log, seconds=170)
    finally:
        stop(proc)
    text = log.read_text(errors="replace")
    assert "gradio" in page.lower()
    assert "preloading hot_phrases.json in the background" in text
    assert (status["state"], status["total"], status["generated"], status["failed"]) == ("done", phrases, phrases, 0)
    assert (clone / ".venv" / "bin" / "python").exists()
    assert (clone / ".venv" / ".stamp-requirements.txt").is_file()
    assert "installing requirements.txt" in text
    assert "fetching the Kokoro voices" in text
    voices = clone / ".venv" / "share" / "voice-tts" / "kokoro-js-1.2.1"
    assert len(list(voices.glob("*.bin"))) == 36 and (voices / ".stamp").is_file()
    assert cache.is_dir() and (cache.stat().st_mode & 0o777) == 0o700
    assert f"preload: {phrases} phrases, {phrases} generated, 0 already cached, 0 failed" in text

    # Second start: no reinstall, everything cached. (A preload that fails and the app that
    # serves anyway: test_background_preload.py, in process.)
    log = tmp_path / "second.log"
    proc = start(clone, log, env, "--port", str(free_port))
    try:
        wait_serving(proc, url, log, seconds=60)
        wait_preloaded(proc, url, log, seconds=60)
    finally:
        stop(proc)
    text = log.read_text(errors="replace")
    assert "installing requirements.txt" not in text and "fetching the Kokoro voices" not in text
    assert f"preload: {phrases} phrases, 0 generated, {phrases} already cached, 0 failed" in text

