"""ALFWorld env throughput, latency and memory: plain in-process engine vs router + workers.

One workload for both sides: M concurrent clients play E episodes; episode i resets game
i mod G (G ≥ 50 generated games), takes S random admissible actions (seeded per episode) and
closes. (a) `plain`: the stock engine as AlfredTWEnv uses it (`textworld.start` with the ALFWorld
wrappers, load + reset + step, nothing cached) in this one process, one lock around env calls
(the engine is not thread-safe). (b) `http`: `env.alfworld.launch` router + W workers on loopback.
Steps/s count only steps, with resets inside the wall time. Modes:

    throughput  (a) and (b) at each M in --clients; ratio (b)/(a), reset/step p50/p99
    memory      (b) only, E episodes (e.g. 1000): worker RSS after episode 100 and at the end
    open        (b) only, --open N episodes held open at once, one step each, RSS per episode

    PYTHONPATH=. .venv/bin/python benchmarks/alfworld_env.py --mode throughput --clients 8,32

`--tiny` (the test suite's smoke run, any mode): 4 games, 4 episodes of 2 steps on 2 clients and
1 worker (memory: RSS after episode 2 and 4; open: 4 episodes); the same code path.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from benchmarks.cli import parse_with_tiny, run_clients
from env.alfworld import launch
from env.launch import free_port_block
from evolving_rl.config import Config, load_config

logger = logging.getLogger("alfworld_env")
TINY = {"clients": "2", "episodes": 4, "steps": 2, "games": 4, "workers": 1, "warmup": 2,
        "open": 4}


@dataclass
class Tally:
    """Latencies and counts of one run (appends are atomic under the GIL)."""

    resets: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def timed(self, into: list[float], call: Callable):
        start = time.perf_counter()
        result = call()
        into.append(time.perf_counter() - start)
        return result


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000 if values else 0.0


def report(name: str, tally: Tally) -> float:
    rate = len(tally.steps) / tally.wall_s
    logger.info("%-6s %7.1f steps/s  wall %6.1f s  reset p50/p99 %6.0f/%6.0f ms  step p50/p99 "
                "%5.0f/%5.0f ms  errors %d", name, rate, tally.wall_s, pct(tally.resets, .5),
                pct(tally.resets, .99), pct(tally.steps, .5), pct(tally.steps, .99),
                len(tally.errors))
    return rate


def plain_run(root: Path, games: list[str], args, n_clients: int) -> Tally:
    """(a) The stock engine in this process, AlfredTWEnv-style, one lock."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    lock, tally = threading.Lock(), Tally()

    def load_reset(path: str):
        with lock:
            env = textworld.start(path, infos, wrappers=[AlfredDemangler(shuffle=False),
                                                         AlfredInfos])
            return env, env.reset()

    def step(env, action: str):
        with lock:
            return env.step(action)[0]

    def play(i: int) -> None:
        rng = random.Random(args.seed * 100003 + i)
        path = str(root / games[i % len(games)])
        env, state = tally.timed(tally.resets, lambda: load_reset(path))
        for _ in range(args.steps):
            action = rng.choice(state.admissible_commands)
            state = tally.timed(tally.steps, lambda a=action: step(env, a))
        env.close()

    tally.wall_s = run_clients(n_clients, args.episodes, play)
    return tally


class Http:
    """A thread's session with the router."""

    def __init__(self, url: str) -> None:
        self.url, self.session = url, requests.Session()

    def post(self, path: str, payload: dict) -> dict:
        resp = self.session.post(f"{self.url}{path}", json=payload, timeout=300)
        if resp.status_code != 200:
            raise RuntimeError(f"{path} -> {resp.status_code} {resp.text[:200]}")
        return resp.json()


def http_run(url: str, games: list[str], args, n_clients: int, n_episodes: int,
             on_episode: Callable[[int], None] | None = None) -> Tally:
    """(b) The same workload through the router."""
    tally, local = Tally(), threading.local()

    def play(i: int) -> None:
        http = getattr(local, "http", None) or Http(url)
        local.http = http
        rng = random.Random(args.seed * 100003 + i)
        try:
            game = {"game": games[i % len(games)]}
            view = tally.timed(tally.resets, lambda: http.post("/reset", game))
            for _ in range(args.steps):
                action = rng.choice(view["admissible_commands"])
                payload = {"episode_id": view["episode_id"], "action": action}
                view = tally.timed(tally.steps, lambda p=payload: http.post("/step", p))
            http.post("/close", {"episode_id": view["episode_id"]})
        except (RuntimeError, requests.RequestException) as err:
            tally.errors.append(str(err))
        if on_episode is not None:
            on_episode(i)

    tally.wall_s = run_clients(n_clients, n_episodes, play)
    return tally


def worker_rss(url: str) -> list[int]:
    health = requests.get(f"{url}/health", timeout=10).json()
    return [psutil.Process(w["pid"]).memory_info().rss for w in health["workers"]]


def start_servers(args, root: Path, run_dir: Path) -> tuple[str, Config]:
    router = free_port_block(1 + args.workers)
    base = router + 1
    overrides = [f"alfworld.data_root={root}", f"alfworld.port={router}",
                 f"alfworld.worker_base_port={base}", f"alfworld.n_workers={args.workers}",
                 f"alfworld.log_dir={run_dir / 'logs'}",
                 f"alfworld.capacity={args.capacity}"]
    cfg = load_config(args.config, overrides)
    launch.start(cfg)
    return f"http://127.0.0.1:{router}", cfg


def memory_mode(url: str, games: list[str], args) -> None:
    marks: dict[str, list[int]] = {}
    done = itertools.count(1)

    def on_episode(_i: int) -> None:
        n = next(done)
        if n in (args.warmup, args.episodes):
            marks[str(n)] = worker_rss(url)

    tally = http_run(url, games, args, args.clients[0], args.episodes, on_episode)
    report("http", tally)
    warm, end = sum(marks[str(args.warmup)]), sum(marks[str(args.episodes)])
    logger.info("worker RSS after episode %d: %.1f MB, after episode %d: %.1f MB (growth %.1f%%)"
                " per worker %s -> %s", args.warmup, warm / 2**20, args.episodes, end / 2**20,
                100 * (end - warm) / warm, [m >> 20 for m in marks[str(args.warmup)]],
                [m >> 20 for m in marks[str(args.episodes)]])


def open_mode(url: str, games: list[str], args) -> None:
    before = sum(worker_rss(url))
    ids: list[str] = []
    errors: list[str] = []
    local = threading.local()

    def open_one(i: int) -> None:
        http = getattr(local, "http", None) or Http(url)
        local.http = http
        try:
            ids.append(http.post("/reset", {"game": games[i % len(games)]})["episode_id"])
        except (RuntimeError, requests.RequestException) as err:
            errors.append(str(err))

    wall = run_clients(args.clients[0], args.open, open_one)
    after = sum(worker_rss(url))
    health = requests.get(f"{url}/health", timeout=10).json()
    live = sum(w["live_episodes"] for w in health["workers"])
    http = Http(url)
    for episode_id in ids:
        view = http.post("/step", {"episode_id": episode_id, "action": "look"})
        assert view["episode_id"] == episode_id
    for episode_id in ids:
        http.post("/close", {"episode_id": episode_id})
    logger.info("open: %d episodes open at once (%d live per router), %d errors, %.1f s; "
                "worker RSS %.0f -> %.0f MB: %.2f MB per live episode (incl. game cache)",
                len(ids), live, len(errors), wall, before / 2**20, after / 2**20,
                (after - before) / 2**20 / max(1, len(ids)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("throughput", "memory", "open"), default="throughput")
    parser.add_argument("--config", default="configs/alfworld.yaml")
    parser.add_argument("--data-root", default="data/alfworld_generated")
    parser.add_argument("--clients", default="8,32", help="comma-separated M values")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--plain-episodes", type=int, default=0, help="E for (a); 0: same")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--games", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--open", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_with_tiny(parser, argv, TINY)
    args.clients = [int(c) for c in args.clients.split(",")]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    load_config(args.config)  # fail early on a bad config
    root = Path(args.data_root).resolve()
    games = sorted(str(p.relative_to(root)) for p in root.glob("json_2.1.1/*/*/*/game.tw-pddl"))
    games = games[:args.games]
    if len(games) < min(50, args.games):
        raise SystemExit(f"need >= 50 games under {root}; generate them first")
    logger.info("%d games, %d CPUs, load average %s", len(games), os.cpu_count(),
                os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="alfworld_bench_") as tmp:
        url, cfg = start_servers(args, root, Path(tmp))
        try:
            if args.mode == "memory":
                memory_mode(url, games, args)
            elif args.mode == "open":
                open_mode(url, games, args)
            else:
                throughput_mode(url, root, games, args)
        finally:
            launch.stop(cfg)


def throughput_mode(url: str, root: Path, games: list[str], args) -> None:
    plain_episodes = args.plain_episodes or args.episodes
    for m in args.clients:
        logger.info("--- M=%d clients, E=%d episodes (plain E=%d), S=%d steps, %d workers", m,
                    args.episodes, plain_episodes, args.steps, args.workers)
        http_rate = report("http", http_run(url, games, args, m, args.episodes))
        plain_args = argparse.Namespace(**{**vars(args), "episodes": plain_episodes})
        plain_rate = report("plain", plain_run(root, games, plain_args, m))
        logger.info("ratio http/plain at M=%d: %.2fx  (load average %s)", m,
                    http_rate / plain_rate, os.getloadavg())


if __name__ == "__main__":
    main()
