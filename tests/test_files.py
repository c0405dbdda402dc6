"""Result files for the web UI (lib/audio/files.py): one private directory per service (0700,
unpredictable, owned by us, not a symlink), files written atomically with mode 0600,
trimmed across every format, removed on close; exports leave nothing behind."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lib.audio.files import ResultFiles
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest
from lib.ui.handlers import Handlers


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The process's temporary directory, for this test alone: every leak lands here."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def test_the_directory_is_private_unpredictable_and_ours(private_tmp: Path) -> None:
    one, two = ResultFiles(), ResultFiles()
    try:
        a, b = one.directory, two.directory
        assert a != b and a.parent == b.parent == private_tmp  # mkdtemp: a random name each
        assert a.name.startswith("tts-results-") and len(a.name) > len("tts-results-") + 6
        assert mode(a) == 0o700 and os.lstat(a).st_uid == os.getuid() and not a.is_symlink()
    finally:
        one.close()
        two.close()
    assert not a.exists() and not b.exists()


def test_files_are_0600_and_replace_the_old_one_in_one_step(private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = ResultFiles()
    try:
        target = files.write("abc.wav", b"first version")
        assert target.parent == files.directory and mode(target) == 0o600
        renames: list[tuple[str, str]] = []
        real_replace = os.replace

        def watched(src: str, dst: str) -> None:
            renames.append((os.path.basename(src), os.path.basename(dst)))
            assert Path(src).read_bytes() == b"second version"  # complete before it is renamed
            assert mode(Path(src)) == 0o600
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", watched)
        files.write("abc.wav", b"second version")
        assert len(renames) == 1 and renames[0][0].startswith(".part-") and renames[0][1] == "abc.wav"
        assert target.read_bytes() == b"second version" and mode(target) == 0o600

        def broken(src: str, dst: str) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "replace", broken)
        with pytest.raises(OSError):
            files.write("abc.wav", b"third version, never finished")
        assert target.read_bytes() == b"second version"  # a reader never sees half a file
        assert [p.name for p in files.directory.iterdir()] == ["abc.wav"]  # no temporary file left
    finally:
        files.close()


def test_names_cannot_leave_the_directory(private_tmp: Path) -> None:
    files = ResultFiles()
    try:
        for name in ("../../escape.wav", "/etc/passwd", "..", "a/b/c.mp3"):
            written = files.write(name, b"x")
            assert written.parent == files.directory, name
        assert not (private_tmp / "escape.wav").exists()
    finally:
        files.close()


def test_a_directory_that_was_widened_or_replaced_is_not_used(private_tmp: Path) -> None:
    files = ResultFiles()
    try:
        first = files.directory
        first.chmod(0o755)  # someone widened it
        second = files.write("a.wav", b"x").parent
        assert second != first and mode(second) == 0o700
        trap = private_tmp / "attacker"
        trap.mkdir()
        os.rename(second, private_tmp / "moved")
        os.symlink(trap, second)  # the same name, now a symlink to someone else's directory
        third = files.write("b.wav", b"y").parent
        assert third not in (second, trap) and not third.is_symlink() and mode(third) == 0o700
        assert list(trap.iterdir()) == []  # nothing was written through the symlink
    finally:
        files.close()


def test_files_are_trimmed_across_every_format(private_tmp: Path) -> None:
    files = ResultFiles(keep=5)
    try:
        for i in range(32):  # trimmed every 16 writes
            ext = ("wav", "mp3", "ogg", "flac", "json")[i % 5]
            files.write(f"{i:032x}.{ext}", f"result {i}".encode())
        left = sorted(p.name for p in files.directory.iterdir())
        assert len(left) == 5
        assert f"{31:032x}.{('wav', 'mp3', 'ogg', 'flac', 'json')[31 % 5]}" in left  # the newest stays
        assert files.trim() == 0
    finally:
        files.close()


@pytest.fixture
def service(tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TTSService]:
    monkeypatch.setenv("TTS_ADMIN_TOKEN", "t")
    config = load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "cache"),
                                            "voices.prewarm": False})  # fmt: skip
    svc = TTSService(config, ToneEngine())
    yield svc
    svc.close()


def test_ui_results_and_exports_stay_in_the_private_directory_and_go_on_close(
    service: TTSService, private_tmp: Path, tmp_path: Path
) -> None:
    handlers = Handlers(service, tmp_path / "hot.json")
    paths = []
    for fmt in ("wav", "mp3", "ogg"):
        path, *_ = handlers.synthesise("preset", None, "tone-low", "", "Now boarding.", "", 0, 1.0, fmt, True, [],
                                       None, progress=lambda *a, **k: None)  # type: ignore[arg-type]  # fmt: skip
        paths.append(Path(path))
    for _ in range(3):
        export, _ = handlers.export_top("t", None)  # type: ignore[arg-type]
        paths.append(Path(export))
        assert json.loads(Path(export).read_text(encoding="utf-8"))["phrases"]
    directory = service.files.directory
    assert {p.parent for p in paths} == {directory}
    assert all(mode(p) == 0o600 for p in paths)
    assert [p.name for p in private_tmp.iterdir()] == [directory.name]  # no directory per export
    assert not str(directory).startswith(str(service.config.cache.dir))  # outside the cache's size limit
    assert service.synthesise(TTSRequest(text="Now boarding.", voice="tone-low")).path.parent == directory
    service.close()
    assert list(private_tmp.iterdir()) == []
