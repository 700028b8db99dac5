"""Decrypting a ZipCrypto archive with the compiled `unzip` binary (Info-ZIP), when installed.

Owns `unzip_available` and `unzip_members`. Python's `zipfile` decrypts ZipCrypto byte by byte
in Python; `unzip` does it in C (the two timed in docs/results/2026-12-02-mind2web-server.md).
The password never appears on a command line or in an environment: `unzip` reads it from its
controlling terminal, a pseudo-terminal this process holds (`setsid --ctty` makes it the child's),
and it is written there only once `unzip` has turned echo off after its prompt. A second prompt
means the password was wrong: the child is killed and `unzip_members` returns False. Any other
failure (a non-zero exit, members missing afterwards, no progress for `idle_timeout_s`) raises
`UnzipError`, and the caller may fall back on `zipfile`.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import termios
import time
from collections.abc import Callable, Sequence
from pathlib import Path

PROMPT = re.compile(rb"password: |reenter: ")
WILDCARDS = frozenset("*?[]\\")  # unzip reads member arguments as patterns


class UnzipError(RuntimeError):
    """`unzip` failed for a reason other than a wrong password."""


def unzip_available() -> bool:
    """Whether `unzip` and `setsid` (util-linux) are on PATH."""
    return shutil.which("unzip") is not None and shutil.which("setsid") is not None


def plain_names(names: Sequence[str]) -> bool:
    """Whether every member name passes to `unzip` as itself (no pattern, no option)."""
    return all(not (WILDCARDS & set(n)) and not n.startswith("-") for n in names)


def _extracted_bytes(dest: Path) -> int:
    return sum(p.stat().st_size for p in dest.iterdir() if p.is_file())


def _read(master: int, timeout_s: float) -> bytes | None:
    """Output of the terminal within `timeout_s` (b"" if none); None once it is closed."""
    ready, _, _ = select.select([master], [], [], timeout_s)
    if not ready:
        return b""
    try:
        return os.read(master, 4096) or None
    except OSError:  # EIO: the child closed the terminal
        return None


def _converse(proc: subprocess.Popen, master: int, password: bytes, dest: Path,
              on_progress: Callable[[int], None], idle_timeout_s: float) -> tuple[bool, bytes]:
    """Answer the password prompt once; (password accepted, the terminal's output)."""
    output, answered, idle_since, done = b"", 0, time.monotonic(), 0
    while True:
        data = _read(master, 0.1)
        if data is None:
            break
        output += data
        if len(PROMPT.findall(output)) > answered:
            if answered:
                proc.kill()
                proc.wait()
                return False, output
            if not termios.tcgetattr(master)[3] & termios.ECHO:
                os.write(master, password + b"\n")
                answered += 1
        extracted = _extracted_bytes(dest)
        if data or extracted != done:
            idle_since, done = time.monotonic(), extracted
            on_progress(extracted)
        elif time.monotonic() - idle_since > idle_timeout_s:
            proc.kill()
            proc.wait()
            raise UnzipError(f"unzip made no progress for {idle_timeout_s:.0f} s")
        if not data and proc.poll() is not None:
            break
    return True, output


def unzip_members(zip_path: Path, names: Sequence[str], dest: Path, password: str,
                  on_progress: Callable[[int], None], idle_timeout_s: float = 120.0) -> bool:
    """Extract `names` of `zip_path` flat into `dest` (each under its base name); False when
    the password is wrong. `on_progress(bytes written so far)` is called as files grow."""
    if not plain_names(names):
        raise UnzipError("member names that unzip would read as patterns or options")
    dest.mkdir(parents=True, exist_ok=True)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(["setsid", "--ctty", "unzip", "-o", "-j", str(zip_path),
                                 *names, "-d", str(dest)],
                                stdin=slave, stdout=slave, stderr=slave, close_fds=True)
        os.close(slave)
        slave = -1
        accepted, output = _converse(proc, master, password.encode(), dest, on_progress,
                                     idle_timeout_s)
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)
    if not accepted:
        return False
    status = proc.wait()
    missing = [n for n in names if not (dest / Path(n).name).is_file()]
    if status != 0 or missing:
        tail = output.decode(errors="replace").replace(password, "***")[-300:]
        raise UnzipError(f"unzip exited {status}, {len(missing)} member(s) missing: {tail!r}")
    return True
