#!/usr/bin/env bash
# Start the voice-cloning TTS app, or run its checks.
#
#   ./run.sh [webui.py flags]   set up .venv, serve UI + API at once, preload hot_phrases.json beside it
#   ./run.sh test [pytest args] set up the development requirements, run ruff, mypy, pytest
#   ./run.sh coverage           lib/'s line coverage over the non-browser tests (not a gate)
#
# Works from a fresh clone with Python 3.11+ and access to the package registry.
# Requirements are installed again only when a requirements file changes (a hash stamp
# inside .venv). Environment: PYTHON picks the interpreter for a new .venv;
# TTS_SKIP_PRELOAD=1 skips the preload; every TTS_* config variable applies (README).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
VENV=.venv
VPY="$VENV/bin/python"

log() { printf 'run.sh: %s\n' "$*" >&2; }

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

ensure_venv() {
    if [ ! -x "$VPY" ]; then
        local py
        py=$(find_python) || { log "Python 3.11 or newer is required (set PYTHON=/path/to/python3.11)"; exit 1; }
        log "creating $VENV with $py"
        "$py" -m venv "$VENV"
        "$VPY" -m pip install --quiet --upgrade pip
    fi
}

# install_requirements FILE [FILE...]: pip install -r the first FILE unless the hash of
# all the given files (the first one and those it includes) matches the stamp.
install_requirements() {
    local main=$1 stamp="$VENV/.stamp-$1" digest
    digest=$(cat "$@" | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
        return 0
    fi
    log "installing $main"
    "$VPY" -m pip install --quiet --disable-pip-version-check -r "$main"
    echo "$digest" >"$stamp"
}

# The CosyVoice stack (torch CPU + CosyVoice code) for its integration tests, installed
# into .venv, again only when its requirements or install script change.
install_cosyvoice() {
    local stamp="$VENV/.stamp-cosyvoice" digest
    digest=$(cat requirements-cosyvoice.txt tests/install_cosyvoice.sh | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
        return 0
    fi
    log "installing the CosyVoice stack (tests/install_cosyvoice.sh)"
    PYTHON="$PWD/$VPY" VIRTUAL_ENV="$PWD/$VENV" bash tests/install_cosyvoice.sh
    echo "$digest" >"$stamp"
}

# The Kokoro base's voice files (builtin.base: kokoro) from the npm registry: `npm pack
# kokoro-js@1.2.1`, keep the voices listed in lib/engines/builtin/kokoro/voices.sha256 (the
# Mandarin and English ones), check every file against that list, install them into
# .venv/share/voice-tts/kokoro-js-1.2.1. Again only when the list changes (a stamp beside them).
# Without npm, or when the registry cannot be reached, the app starts on the espeak base and
# says how to install the rest; the start goes on.
KOKORO_LIST=lib/engines/builtin/kokoro/voices.sha256
KOKORO_DIR="$VENV/share/voice-tts/kokoro-js-1.2.1"
install_kokoro_voices() {
    local stamp="$KOKORO_DIR/.stamp" digest tmp list
    list="$PWD/$KOKORO_LIST"
    digest=$(sha256sum "$list" | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] \
        && grep -v '^#' "$list" | while read -r _ name; do [ -f "$KOKORO_DIR/$name" ] || exit 1; done; then
        return 0
    fi
    if ! command -v npm >/dev/null 2>&1; then
        log "warning: npm is not installed: the Kokoro voices cannot be fetched; the builtin engine will use espeak"
        return 0
    fi
    log "fetching the Kokoro voices (npm pack kokoro-js@1.2.1)"
    tmp=$(mktemp -d)
    if ! (cd "$tmp" && npm pack --silent kokoro-js@1.2.1 >/dev/null 2>npm.log \
          && tar -xzf kokoro-js-1.2.1.tgz package/voices \
          && cd package/voices && grep -v '^#' "$list" | sha256sum --check --quiet --strict); then
        log "warning: the Kokoro voices could not be fetched or did not match $KOKORO_LIST; the builtin engine will use espeak"
        rm -rf "$tmp"
        return 0
    fi
    mkdir -p "$KOKORO_DIR"
    grep -v '^#' "$list" | while read -r _ name; do
        install -m 0644 "$tmp/package/voices/$name" "$KOKORO_DIR/$name"
    done
    rm -rf "$tmp"
    echo "$digest" >"$stamp"
}

run_tests() {
    install_requirements requirements-dev.txt requirements.txt requirements-judge.txt
    install_kokoro_voices
    if [ -f tests/install_cosyvoice.sh ] && { [ -n "${CI:-}" ] || [ "${TTS_TEST_COSYVOICE:-}" = 1 ]; }; then
        install_cosyvoice
    fi
    log "ruff"
    "$VENV/bin/ruff" check lib webui.py preload_cache.py tests bench
    "$VENV/bin/ruff" format --check --quiet lib webui.py preload_cache.py
    log "mypy"
    "$VENV/bin/mypy" lib
    log "pytest"
    local status=0
    if [ "$#" -gt 0 ]; then
        # Arguments: exactly the run asked for.
        "$VENV/bin/pytest" "$@" || status=$?
        check_pytest_status "$status"
        exit "$status"
    fi
    # The whole suite in three runs. Everything but the browser on TTS_TEST_WORKERS workers
    # (pytest-xdist, file by file: a file's fixtures stay in one process; coverage is its
    # own run, ./run.sh coverage: tracing slowed this one), at the lowest CPU priority (nice 19):
    # it is CPU-bound, and nothing in it is real time. Beside it, at normal priority, the
    # tests whose result plays live (real time: what the operator hears may not stand still
    # 0.3 s; the CPU is theirs whenever they need it, and they need little); their report
    # follows the first one's. Then the other browser tests on two workers, test by test
    # (beside the first run too, they and it failed tests for want of CPU). All run; the
    # first failure decides.
    local workers="${TTS_TEST_WORKERS:-3}" reports code=0
    reports=$(mktemp -d)
    "$VENV/bin/pytest" -p no:cacheprovider -m playback --durations=10 \
        --basetemp "$reports/tmp" >"$reports/playback.txt" 2>&1 &
    BESIDE=$!
    trap 'kill "$BESIDE" 2>/dev/null || true' EXIT  # stopped early: not left running
    run_part status nice -n 19 "$VENV/bin/pytest" -n "$workers" --dist loadfile -m "not browser" --durations=20
    wait "$BESIDE" || code=$?
    trap - EXIT
    log "the playback tests (run beside the above):"
    cat "$reports/playback.txt"
    rm -rf "$reports"
    check_pytest_status "$code"
    [ "$status" -ne 0 ] || status=$code
    run_part status "$VENV/bin/pytest" -n 2 --dist load --maxschedchunk 1 -m "browser and not playback" --durations=10
    exit "$status"
}

# The run beside the first one (run_tests): its process id.
BESIDE=""

# run_part VAR COMMAND...: one pytest run of the suite; VAR keeps the first failure's status.
run_part() {
    local -n first_failure="$1"
    shift
    local run=0
    "$@" || run=$?
    check_pytest_status "$run"
    [ "$first_failure" -ne 0 ] || first_failure=$run
}

check_pytest_status() {
    if [ "$1" -eq 5 ]; then
        log "pytest collected no tests: that is a failure, not a pass"
        exit 5
    fi
}

# lib/'s line coverage over the non-browser tests: measured and printed, never a gate, and
# not part of ./run.sh test (tracing every line slowed the gating run).
run_coverage() {
    install_requirements requirements-dev.txt requirements.txt requirements-judge.txt
    install_kokoro_voices
    "$VENV/bin/pytest" -n "${TTS_TEST_WORKERS:-3}" --dist loadfile -m "not browser" -q \
        --cov=lib --cov-report=term:skip-covered "$@"
}

ensure_venv
if [ "${1:-}" = test ]; then
    shift
    run_tests "$@"
fi
if [ "${1:-}" = coverage ]; then
    shift
    run_coverage "$@"
    exit $?
fi

install_requirements requirements.txt
install_kokoro_voices

# Creates the cache directory the app will use (config file, TTS_* variables, flags;
# mode 0700) and checks the configuration before anything starts.
"$VPY" -m lib.cli prepare "$@" >/dev/null || { log "the configuration is invalid (see above)"; exit 2; }

# The UI serves at once; the shipped phrase list is preloaded beside it, in the same
# process (a phrase asked for before its turn is made then, once). Its progress shows
# here, in the UI's banner and Preload tab, and at GET /api/preload.
preload=()
if [ "${TTS_SKIP_PRELOAD:-}" = 1 ]; then
    log "TTS_SKIP_PRELOAD=1: not preloading"
elif [ -f hot_phrases.json ]; then
    log "starting the UI; preloading hot_phrases.json in the background"
    preload=(--preload hot_phrases.json)
fi

exec "$VPY" webui.py "${preload[@]}" "$@"
