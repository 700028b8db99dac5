"""Free TCP ports for tests and ad-hoc runs, that no other process is handed meanwhile.

Owns `free_port` and `free_port_block` (re-exported by `env.launch`). A port is picked, then bound
by a server started later; two things could take it in between, and these helpers rule both out:

- the kernel's own picks: a `bind(0)` and the source port of every outgoing connection come from
  the ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`, 32768-60999 by default), so
  ports are chosen outside it (`_candidates`: below it, else above it);
- another process using these helpers (concurrent test processes): each port handed out is
  claimed with an exclusive `flock` on `<tmp>/evolving_rl-ports/<port>.lock`, held until this
  process exits (the kernel releases it even on SIGKILL), and a claimed port is skipped — by
  other processes and by later calls of this one alike.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from collections.abc import Collection
from pathlib import Path

LOCK_DIR = Path(tempfile.gettempdir()) / "evolving_rl-ports"
PORT_FLOOR = 10000  # below: well-known services and the configs' default ports
_TRIES = 200
_MIN_RANGE = 1000
_rng = random.Random()  # its own generator: a test seeding `random` must not align processes
_claims: list[int] = []  # descriptors of the locks this process holds, open until it exits


class NoFreePortError(RuntimeError):
    """No port could be found and claimed."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(v) for v in
                     Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return low, high


def _candidates() -> range:
    """The ports picked from: below the ephemeral range, else above it, else (a range that leaves
    too little room either side) every unprivileged port, the lock still ruling out our own."""
    low, high = _ephemeral_range()
    if low - PORT_FLOOR >= _MIN_RANGE:
        return range(PORT_FLOOR, low)
    if 65535 - high >= _MIN_RANGE:
        return range(high + 1, 65536)
    return range(1024, 65536)


def bindable(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _claim(port: int) -> bool:
    """Lock `port` for the life of this process; False when a lock on it is held already."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_DIR / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _claims.append(fd)
    return True


def free_port_block(count: int, host: str = "127.0.0.1", exclude: Collection[int] = ()) -> int:
    """First of `count` consecutive ports, none in `exclude`, all bindable now and claimed for
    this process (a router and its workers at `worker_base_port + i`)."""
    candidates = _candidates()
    for _ in range(_TRIES):
        base = _rng.randrange(candidates.start, candidates.stop - count + 1)
        ports = range(base, base + count)
        if not any(p in exclude for p in ports) and all(
                _claim(p) and bindable(p, host) for p in ports):
            return base
    raise NoFreePortError(f"no {count} consecutive free ports on {host} in {candidates} "
                          f"outside {len(exclude)} excluded ones")


def free_port(host: str = "127.0.0.1", exclude: Collection[int] = ()) -> int:
    """A port on `host`, not in `exclude`, bindable now and claimed for this process."""
    return free_port_block(1, host, exclude)
