"""espeak-ng worker process: every utterance runs in a fresh fork of an idle parent.

Run by :mod:`lib.engines.builtin.espeak` as ``python _espeak_worker.py``; imports only
the standard library and ``espeakng_loader``. Protocol on stdin/stdout: a request is a
4-byte little-endian length plus UTF-8 JSON; a reply is a 4-byte status (0 ok), a 4-byte
length and the payload (int16 PCM for ``synth``, UTF-8 JSON for ``ipa``, UTF-8 text for
``info`` and errors).

Why a fork per utterance: see the module docstring of ``espeak.py``. The parent never
reads a request itself; it forks a child, waits for it and forks the next, so every
child starts from the same process image and reads no memory a previous utterance wrote.

Why the child's reply goes through the parent: a child that dies (espeak-ng 1.52 aborts
with "stack smashing detected" on some texts) used to leave the engine waiting forever,
because the parent kept the reply pipe open and forked the next child. Now the child
writes its reply into a pipe of its own; the parent reads it to the end, reaps the child
and sends the reply on only when the child exited cleanly with a whole one; otherwise it
sends an error reply (status 4) naming how the child ended. So every request gets
exactly one reply, whatever the child did; a child that never ends is the engine's to
kill (it reads with a deadline and kills the whole process group).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import sys

#: Seed of espeak-ng's random generator in every utterance.
_RANDOM_SEED = 20240611

_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


def _read_exact(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _serve_one(lib_path: str, data_path: bytes) -> None:
    """Read one request from stdin and write its reply to fd 1 (the parent's pipe)."""
    (size,) = struct.unpack("<I", _read_exact(0, 4))
    request = json.loads(_read_exact(0, size).decode("utf-8"))
    lib = ctypes.CDLL(lib_path)
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_Synth.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
        ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
    ]  # fmt: skip
    lib.espeak_Info.argtypes = [ctypes.c_void_p]
    lib.espeak_Info.restype = ctypes.c_char_p
    if lib.espeak_Initialize(2, 0, data_path, 0x8000) != 22050:
        _reply(1, b"espeak-ng failed to initialise")
        return
    _fix_random_seeds(lib)
    if request["op"] == "info":
        _reply(0, lib.espeak_Info(None) or b"unknown")
        return
    if request["op"] == "ipa":
        _serve_ipa(lib, request)
        return
    chunks: list[bytes] = []

    def on_audio(wav: ctypes._Pointer[ctypes.c_short], count: int, events: int | None) -> int:
        if count > 0:
            chunks.append(ctypes.string_at(wav, count * 2))
        return 0

    callback = _Callback(on_audio)
    lib.espeak_SetSynthCallback(callback)
    if lib.espeak_SetVoiceByName(request["voice"].encode("ascii")) != 0:
        _reply(2, f"espeak-ng has no voice {request['voice']!r}".encode())
        return
    if request["op"] == "phonemes":
        _reply(0, _text_to_phonemes(lib, request["text"]))
        return
    for key in ("rate", "volume", "pitch", "range"):
        lib.espeak_SetParameter({"rate": 1, "volume": 2, "pitch": 3, "range": 4}[key], int(request[key]), 0)
    text = request["text"].encode("utf-8") + b"\0"
    # espeakCHARS_UTF8 (1), plus espeakPHONEMES (0x100) when the text carries [[phonemes]].
    flags = 1 | (0x100 if request.get("phonemes") else 0)
    status = lib.espeak_Synth(text, len(text), 0, 1, 0, flags, None, None)
    if status != 0:
        _reply(3, f"espeak-ng failed to synthesise (status {status})".encode())
        return
    _reply(0, b"".join(chunks))


def _text_to_phonemes(lib: ctypes.CDLL, text: str) -> bytes:
    """espeak-ng's phoneme mnemonics for ``text`` (what it would say), one clause per line."""
    lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    pointer = ctypes.pointer(ctypes.c_char_p(text.encode("utf-8")))
    out: list[bytes] = []
    while pointer.contents.value:
        clause = lib.espeak_TextToPhonemes(pointer, 1, 0)
        if clause is None:
            break
        out.append(clause)
    return b"\n".join(out)


def _serve_ipa(lib: ctypes.CDLL, request: dict[str, object]) -> None:
    """Reply with the IPA of each text of ``request["items"]`` as a JSON list of strings.

    ``espeak_TextToPhonemes`` in IPA mode (bit 1) with ``^`` tying the letters of one
    phoneme (bit 7, tie in bits 8-23: ``a^ɪ``), as misaki's espeak fallback table expects.
    It returns one clause per call and moves the text pointer on; clauses are joined with
    a space. Spoken nowhere: no audio callback is involved."""
    voice = str(request["voice"]).encode("ascii")
    if lib.espeak_SetVoiceByName(voice) != 0:
        _reply(2, f"espeak-ng has no voice {request['voice']!r}".encode())
        return
    lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    mode = 0x02 | 0x80 | (ord("^") << 8)
    out: list[str] = []
    items = request["items"]
    if not isinstance(items, list):
        _reply(4, b"ipa: items must be a list of texts")
        return
    for item in items:
        buf = ctypes.create_string_buffer(str(item).encode("utf-8"))
        ptr = ctypes.c_char_p(ctypes.addressof(buf))
        clauses: list[str] = []
        while ptr.value:
            phonemes = lib.espeak_TextToPhonemes(ctypes.byref(ptr), 1, mode)
            if phonemes:
                clauses.append(phonemes.decode("utf-8", "replace").strip())
        out.append(" ".join(c for c in clauses if c))
    _reply(0, json.dumps(out, ensure_ascii=False).encode("utf-8"))


def _fix_random_seeds(lib: ctypes.CDLL) -> None:
    """Seed espeak-ng's random generator after ``espeak_Initialize``.

    Why: a fresh process alone is not enough. espeak-ng's generator (breath noise of
    variants such as ``f2``) is seeded from the clock during initialisation, so output
    with a breathy variant changed whenever the wall-clock second changed (measured: 12
    identical ``en-us+f2`` requests gave two outputs, split at a second boundary; across
    8 requests 0.4 s apart, four). ``espeak_ng_SetRandSeed`` before ``espeak_Initialize``
    is undone by it; after it, every utterance starts from the same state (measured:
    identical bytes over time and across processes). Seeding libc ``rand`` alone, which
    the library also imports, changed nothing."""
    lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
    lib.espeak_ng_SetRandSeed(_RANDOM_SEED)


def _reply(status: int, payload: bytes) -> None:
    _write_all(1, struct.pack("<II", status, len(payload)) + payload)


#: Exit code of a child that found stdin closed: the engine is gone.
_EXIT_EOF = 3
#: Reply status the parent sends for a child that died or replied incompletely.
_STATUS_CRASHED = 4


def _whole(reply: bytes) -> bool:
    """Whether ``reply`` is exactly one complete reply frame."""
    return len(reply) >= 8 and struct.unpack("<II", reply[:8])[1] == len(reply) - 8


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _relay(pid: int, reply_fd: int) -> int:
    """Read the child's reply to the end, reap it, and send the engine exactly one
    reply; returns the child's exit code."""
    chunks = []
    while True:
        chunk = os.read(reply_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(reply_fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == _EXIT_EOF:
        return code
    reply = b"".join(chunks)
    del chunks
    if code == 0 and _whole(reply):
        _write_all(1, reply)
    else:
        _reply(_STATUS_CRASHED, f"espeak-ng crashed on this text ({_how_it_ended(code)})".encode())
    return code


def main() -> None:
    lib_path, data_path = sys.argv[1], sys.argv[2].encode()
    while True:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(read_end)
                os.dup2(write_end, 1)  # the reply goes to the parent, never straight to the engine
                os.close(write_end)
                _serve_one(lib_path, data_path)
            except EOFError:
                code = _EXIT_EOF
            except BaseException:
                code = 1
            os._exit(code)
        os.close(write_end)
        if _relay(pid, read_end) == _EXIT_EOF:
            return  # stdin closed: the engine is gone


if __name__ == "__main__":
    main()
