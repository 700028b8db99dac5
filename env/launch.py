"""Generic process launching for the env servers: PID files, health waits, PID-scoped stops.

Owns what every server launcher needs and nothing server-specific: hand a `Config` to a server
process on its command line (`--config-json`, or `--config FILE` when an operator starts one), start
a server command as its own session with output to a log file, wait until its health URL answers 200
naming the PID of the process it spawned (`"pid"` in the JSON body, which every server's `/health`
reports: a check that is not racy, unlike a port check before the start, since another server on the
port answers with its own PID), failing fast when the process dies, write/remove the server's own
PID file, and stop a server by the PID in its PID file after checking that the PID still runs the
expected command. Nothing here ever signals a process it cannot tie to a PID file it was given.
A job that serves for the length of a block spawns its servers `tied_to_this_process()`, so that
the kernel ends them when the job is killed outright (no `finally` runs on SIGKILL or OOM), and
turns SIGTERM into SystemExit (`stopped_on_sigterm`) so that it stops them itself: `job_serving`.
Every server's launcher has one command line, `launcher_main`: `start|stop --config FILE [--set
KEY=VALUE]...`, every wait taken from the config, a config or launch error one line and exit 2.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from env.ports import free_port, free_port_block  # noqa: F401 (re-exported)
from evolving_rl.config import Config, ConfigError, load_config, parse_config, to_dict

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]


class LaunchError(RuntimeError):
    """A server did not come up healthy in time, or exited while starting."""


_PR_SET_PDEATHSIG = 1
_tied = threading.local()


@contextlib.contextmanager
def tied_to_this_process() -> Iterator[None]:
    """Servers spawned by this thread inside the block get SIGTERM from the kernel when this
    thread ends (Linux `PR_SET_PDEATHSIG`; elsewhere a no-op): a job killed outright leaves no
    server behind. Only for a thread that outlives its servers (a job's main thread); never for
    the launchers' `start` commands, whose servers outlive them by design."""
    _tied.on = True
    try:
        yield
    finally:
        _tied.on = False


_PRCTL = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """Run in the forked child before exec: as little as possible (resolved beforehand)."""
    _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def dies_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel SIGTERM the child when the spawning thread ends
    (Linux; None elsewhere): for children that must not outlive their spawner."""
    return _die_with_parent if _PRCTL is not None else None


def config_arguments(cfg: Config) -> list[str]:
    """The arguments that hand `cfg` to a server process (read back by `config_from_args`)."""
    return ["--config-json", json.dumps(to_dict(cfg), separators=(",", ":"))]


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """A server's config options: `--config FILE` or `--config-json JSON` (what the launchers
    pass), and any number of `--set KEY=VALUE`."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="YAML config (configs/*.yaml)")
    source.add_argument("--config-json", help="the whole config as JSON (from a launcher)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key")


def config_from_args(args: argparse.Namespace, overrides: list[str] | None = None) -> Config:
    """The config of `add_config_arguments`' options, their `--set`s and then `overrides`
    applied."""
    every = [*args.overrides, *(overrides or [])]
    if args.config_json is not None:
        return parse_config(json.loads(args.config_json), "--config-json", every)
    return load_config(args.config, every)


def launcher_main(argv: list[str] | None, description: str, start: Callable[[Config], object],
                  stop: Callable[[Config], object]) -> int:
    """The start/stop command line of a server's launcher (`start(cfg)` / `stop(cfg)`: its
    launch API); the exit code: 0, or 2 after one line naming a config or launch error."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("action", choices=("start", "stop"))
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = config_from_args(args)
        (start if args.action == "start" else stop)(cfg)
    except (ConfigError, LaunchError) as err:
        logger.error("%s", err)
        return 2
    return 0


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit in a server process, so its `finally` blocks clean up."""

    def _raise_exit(signum: int, _frame: object) -> None:
        raise SystemExit(f"signal {signum}")

    signal.signal(signal.SIGTERM, _raise_exit)


def _listening(port: int, host: str) -> bool:
    """Whether something accepts connections on `host:port` (a TIME_WAIT port does not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def port_taken(port: int, host: str) -> bool:
    """Whether a server already listens on `host:port` (checked before a job writes anything)."""
    return _listening(port, host)


def write_pid_file(path: str | Path) -> Path:
    """Record this process's PID at `path`; removed at exit if it still holds our PID."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    path.write_text(f"{pid}\n", encoding="utf-8")

    def _remove() -> None:
        if read_pid(path) == pid:
            path.unlink(missing_ok=True)

    atexit.register(_remove)
    return path


def read_pid(path: str | Path) -> int | None:
    """The PID in a PID file, or None when it is missing or unreadable."""
    try:
        return int(Path(path).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def health_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True when GET `url` answers 200."""
    return _health(url, timeout_s) is not None


def _health(url: str, timeout_s: float = 2.0) -> dict | None:
    """The JSON object of a 200 answer to GET `url` ({} for another body); None otherwise."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            if response.status != 200:
                return None
            body = response.read()
    except (urllib.error.URLError, OSError):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def wait_for_health(url: str, timeout_s: float, proc: subprocess.Popen | None = None,
                    poll_s: float = 0.2, names_pid: bool = True) -> None:
    """Block until `url` is healthy; raise `LaunchError` on timeout or if `proc` exits. With
    `proc` (and `names_pid`, for our own servers), healthy means that the answer names
    `proc.pid` (`"pid"`): another server on the same port is never taken for it."""
    deadline = time.monotonic() + timeout_s
    other = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise LaunchError(f"server exited with code {proc.returncode} before {url} was up"
                              + (f" (pid {other} answers there)" if other else ""))
        body = _health(url)
        if body is not None and (proc is None or not names_pid or body.get("pid") == proc.pid):
            return
        if body is not None:
            other = body.get("pid")
        time.sleep(poll_s)
    mismatch = f": pid {other} answers there, not pid {proc.pid} we started" if other else ""
    raise LaunchError(f"{url} not healthy after {timeout_s:.0f} s{mismatch}")


def spawn_server(cmd: list[str], log_path: str | Path,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `cmd` in its own session (repo root on PYTHONPATH), output appended to `log_path`;
    returns at once (see `start_server` to also wait for health)."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    paths = [str(REPO_ROOT), child_env.get("PYTHONPATH", "")]
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    tied = getattr(_tied, "on", False)
    with log_path.open("ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=dies_with_parent() if tied else None)


def start_server(cmd: list[str], health_url: str, log_path: str | Path,
                 timeout_s: float = 120.0, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `cmd` in its own session (repo root on PYTHONPATH), output appended to `log_path`,
    and wait until `health_url` answers for the process started (its PID in the body). A port
    already in use is refused first, naming it (`LaunchError`); a start racing another on the
    same port fails the PID check instead. On failure the process is stopped and `LaunchError`
    names the log, and, when the process exited by itself, the last line it wrote there (its
    reason, e.g. the file a server refused to start on); a wait interrupted otherwise stops it
    too, and the interruption goes on.
    """
    address = urllib.parse.urlsplit(health_url)
    if address.port is not None and _listening(address.port, address.hostname or ""):
        raise LaunchError(f"port {address.port} of {address.hostname} is in use (another "
                          "server, perhaps another run's): stop it by its PID file or choose "
                          "another port with --set")
    written = Path(log_path).stat().st_size if Path(log_path).is_file() else 0
    proc = spawn_server(cmd, log_path, env)
    try:
        wait_for_health(health_url, timeout_s, proc)
    except LaunchError as err:
        exited = proc.poll() is not None
        stop_process(proc)
        last = _last_line(Path(log_path), written) if exited else ""
        raise LaunchError(f"{err}" + (f": {last}" if last else "") + f"; see {log_path}") \
            from None
    except BaseException:  # interrupted (Ctrl-C, a test's timeout): stop what was started
        stop_process(proc)
        raise
    shown = cmd[:cmd.index("--config-json")] if "--config-json" in cmd else cmd
    logger.info("started pid %d (%s), healthy at %s", proc.pid, " ".join(shown), health_url)
    return proc


def _last_line(log_path: Path, offset: int, most: int = 4096) -> str:
    """The last non-blank line the process wrote to `log_path` after `offset` (its end only
    read), shortened to 300 characters."""
    with log_path.open("rb") as log:
        log.seek(max(offset, log.seek(0, os.SEEK_END) - most))
        lines = log.read().decode("utf-8", errors="replace").splitlines()
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return last[:300]


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> int:
    """Terminate a child we started (SIGTERM, then SIGKILL after `timeout_s`); its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)


def stop_pid_file(path: str | Path, expect_in_cmdline: str, timeout_s: float = 10.0) -> bool:
    """Stop the process named by PID file `path` if its command line contains
    `expect_in_cmdline` (guards against a stale file whose PID now belongs to something else).
    Returns True when a process was signalled.
    """
    pid = read_pid(path)
    if pid is None or expect_in_cmdline not in _cmdline(pid):
        logger.info("no running process for %s", path)
        Path(path).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and expect_in_cmdline in _cmdline(pid):
        time.sleep(0.1)
    if expect_in_cmdline in _cmdline(pid):
        logger.warning("pid %d ignored SIGTERM for %.0f s; sending SIGKILL", pid, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    Path(path).unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def serving(cfg: Config, start: Callable[[Config], object],
            stop: Callable[[Config], object]) -> Iterator[None]:
    """`start(cfg)` on entry and `stop(cfg)` on any exit: a server for the duration of a block."""
    start(cfg)
    try:
        yield
    finally:
        stop(cfg)


@contextlib.contextmanager
def stopped_on_sigterm() -> Iterator[None]:
    """In the main thread: SIGTERM raises SystemExit inside the block, so that its `finally`
    blocks (a `serving` block's `stop`) run when the job is terminated; the previous handler
    is restored on exit. Elsewhere a no-op (only the main thread may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    exit_on_sigterm()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def job_serving(cfg: Config, start: Callable[[Config], object],
                stop: Callable[[Config], object]) -> Iterator[None]:
    """`serving` for a job's main thread: the servers are stopped when the job is terminated
    (SIGTERM: `stopped_on_sigterm`) and ended by the kernel when it is killed outright
    (`tied_to_this_process`)."""
    with stopped_on_sigterm(), tied_to_this_process(), serving(cfg, start, stop):
        yield
