"""Shared fixtures: where the real prompt recordings are, a free loopback port, a
threaded uvicorn runner for the real app, and a service on the tone engine."""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import uvicorn
from server_process import NO_ANONYMOUS_LIMITS

REPO = Path(__file__).resolve().parents[1]

#: Files whose tests are ``slow`` (``pytest -m "not slow"`` is the fast set): real faults
#: (killed processes, full disks, stopped Redis), several replicas, the browser, a fresh
#: clone, the real models (CosyVoice, Kokoro: every test marked ``kokoro`` too), the fuzzers.
#: Marked here, in one list, rather than in each file, so that the fast set's contents are
#: visible at a glance (a test of another file that kills a process is marked ``slow`` itself).
SLOW_FILES = frozenset({
    "test_faults_disk.py", "test_faults_engine.py", "test_faults_http.py", "test_faults_leases.py",
    "test_faults_redis.py", "test_shared_replicas.py", "test_batch_replicas.py", "test_objects_replicas.py",
    "test_browser.py", "test_browser_playback.py", "test_run_sh.py", "test_cosyvoice_engine.py",
    "test_cosyvoice_upstream.py", "test_kokoro.py", "test_kokoro_phonemes.py", "test_builtin_clone.py",
    "test_engine_fuzz.py", "test_api_fuzz.py", "test_intelligibility.py",
})  # fmt: skip


#: The longest files, collected first so that on several workers (``run.sh test``: one
#: file per worker at a time) they start at once instead of ending the run alone.
LONGEST_FIRST = (
    "test_browser_playback.py", "test_cosyvoice_upstream.py", "test_cosyvoice_engine.py", "test_run_sh.py",
    "test_kokoro.py", "test_faults_engine.py", "test_streaming.py", "test_preload.py",
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SLOW_FILES or item.get_closest_marker("kokoro") is not None:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything imported by now (gradio, torch, the app: millions of objects that live as
    long as the process) is moved out of the garbage collector's sight (``gc.freeze``),
    so that the full collection each closed service runs (lib/cache/stores.py: it frees the
    other threads' database connections) scans what the tests made, not the libraries:
    0.6 s a close before, in a suite that closes about 700 services."""
    gc.freeze()



def tone_service(tmp_path: Path, *, admin_token: Any = None, engine: Any = None, **overrides: Any) -> Any:
    """A service on the tone test engine (or ``engine``) with its cache under ``tmp_path``
    (``overrides``: config keys, dotted; ``admin_token``: the admin token, None for none)."""
    from lib.config import load_config
    from lib.engines.tone import ToneEngine
    from lib.pipeline.service import TTSService

    values = {
        "engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False,
        "readings.lexicon": str(tmp_path / "lexicon.json"),  # never the working directory's
        **overrides,
    }  # fmt: skip
    config = load_config(env=NO_ANONYMOUS_LIMITS, overrides=values)
    return TTSService(config, engine or ToneEngine(), admin_token=admin_token)


def wait_until(condition: Any, limit: float = 20.0, every: float = 0.05) -> bool:
    """Poll ``condition`` until it holds or ``limit`` seconds pass; its last answer (tests
    assert the outcome, never the time)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return bool(condition())


@pytest.fixture(scope="module")
def espeak_engine() -> Iterator[Any]:
    """The built-in engine on its espeak-ng base, one per test module (its fast base: the
    Kokoro tests build their own)."""
    from lib.config import BuiltinConfig
    from lib.engines.builtin import BuiltinEngine

    engine = BuiltinEngine(BuiltinConfig(base="espeak"))
    yield engine
    engine.close()


def hold_write_lock(db: Path, seconds: float, holding: threading.Event) -> None:
    """Another writer holds the SQLite database ``db``'s write lock for ``seconds``
    (``holding`` is set once it has it): what a busy store looks like to the service."""
    import sqlite3

    conn = sqlite3.connect(str(db), timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        holding.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[Any]:
    """The one factory of a test's services: ``make_service(admin_token=..., engine=...,
    **config overrides)`` is :func:`tone_service` in ``tmp_path`` (the first) or a folder
    of its own in it (the next ones); every service made is closed after the test."""
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        folder = tmp_path if not made else tmp_path / f"service{len(made)}"
        made.append(tone_service(folder, **kwargs))
        return made[-1]

    yield make
    for service in reversed(made):
        service.close()


@pytest.fixture
def http(service: Any) -> Iterator[Any]:
    """The module's ``service`` fixture behind an in-process HTTP client (:func:`in_process`)."""
    from lib.api import create_app

    with in_process(create_app(service)) as client:
        yield client


@pytest.fixture(scope="session", autouse=True)
def _the_working_directorys_lexicon_is_left_alone() -> Iterator[None]:
    """``readings.lexicon`` defaults to ``lexicon.json`` in the working directory (the
    repository, under pytest): a test that edits the lexicon of a service built without its
    own path would leave entries there that every later service reads (a fuzzed "g" read as
    "infinity" once failed a template test). Each worker checks the file is as it found it."""
    path = REPO / "lexicon.json"
    before = path.read_bytes() if path.is_file() else None
    yield
    after = path.read_bytes() if path.is_file() else None
    assert after == before, "a test wrote the working directory's lexicon.json: give its service readings.lexicon"


@pytest.fixture(scope="session")
def testdata_dir() -> Path:
    """``../shared/testdata/voices`` (or ``$TTS_TESTDATA_DIR``): real prompt recordings."""
    path = Path(os.environ.get("TTS_TESTDATA_DIR") or REPO.parent / "shared" / "testdata" / "voices")
    if not (path / "zh_female_prompt.wav").is_file():
        pytest.skip(f"prompt recordings not found in {path}; set TTS_TESTDATA_DIR")
    return path


def run_script(
    script: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """A command-line script of the repository (``webui``, ``preload_cache``) run by its
    ``main`` in this process, as from a shell that sets no ``TTS_`` variable but those of
    ``env``, in ``cwd`` if given: its exit code, stdout and stderr. The scripts as processes
    where the process is the point: test_preload's killed preload, test_invalid_audio (its
    exit), test_run_sh, test_batch (``--server``'s bar), test_faults_engine (SIGTERM)."""
    main = importlib.import_module(script).main
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    clean.update(env or {})
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, clean, clear=True))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse: --help (0) and its refusals (2)
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def preload_main(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
    """``preload_cache.py`` by :func:`run_script`."""
    return run_script("preload_cache", *args, env=env, cwd=cwd)


@contextlib.contextmanager
def in_process(app: Any) -> Iterator[Any]:
    """An HTTP client that calls the ASGI ``app`` in this process (Starlette's TestClient on
    one event loop: no socket, no server thread), for the tests where a real server is not
    the point; a real one (``tests.api_server.LiveServer``) where it is: streaming over a
    socket, slow clients, raw bytes on the wire, kill -9, replicas, the browser. Answers as
    over a socket: a server error is a 500 response (not raised), redirects are not
    followed, and the caller's address is the loopback's."""
    from starlette.testclient import TestClient

    client = TestClient(
        app, base_url="http://127.0.0.1", raise_server_exceptions=False, follow_redirects=False,
        client=("127.0.0.1", 50000),
    )  # fmt: skip
    with client:
        yield client


@pytest.fixture
def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serving(app: Any, port: int) -> Iterator[str]:
    """Run an ASGI ``app`` with uvicorn on ``127.0.0.1:port`` in a thread; yield its URL."""
    # A page or gradio_client with session state holds a heartbeat stream open; do not
    # wait for it at shutdown (uvicorn would wait for every open connection): 0.1 s, after
    # which the streams are cancelled (the test is over; about 260 servers a run waited 1 s).
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=0.1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server on port {port} did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
