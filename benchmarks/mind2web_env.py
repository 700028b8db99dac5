"""Mind2Web env server latency, memory and correctness: the real server vs the logic in-process.

On generated data (`env.mind2web.generate`, size knob `distractors`: a page lists about
distractors + 30 elements). Both sides play the same workload: C client threads replay every
task's gold actions in train mode (reset, each step, close), warm (one untimed pass first, so
tasks and snapshots are cached). (a) `plain`: `TaskStore` + `Episode` called directly in this
process, no HTTP; (b) `http`: the server started by `env.mind2web.launch` on a free loopback port.
Printed: step p50/p99 and steps/s of each, the ratios (b)/(a), and against the targets
(the reference's p99 <= 26 ms at ~300 elements and 16 clients; at ~5,000 elements p50 <= 20 ms,
p99 <= 100 ms with 1 and 16 clients; a cold 5,000-element snapshot build <= 50 ms, with the
builder before it, `benchmarks.snapshot_before`, timed on the same pages for the ratio); cold
pages under concurrency: C clients each replaying its own ~5,000-element task on fresh servers
(every page built once, by the step that shows it), three paths alternating `--cold-rounds`
times: `before` (the old path: the builder before, in the request thread), `thread` (today's
builder in the request thread, `snapshot_processes: 0`) and `pool` (today's builder in the
process pool, one process per core): per round p50/p99 and steps/s of each, then the medians,
the CPU per step of the server's process tree and the clients together (C clients on K cores
average at least C x that / K a step), and the median ratios before/thread and before/pool
(target: pool p99 <= 300 ms at 16 clients); that gold replay (the reference's empty-positive
fallback, so every episode can be won) wins every episode; that a battery of client mistakes
gets no answer >= 500; the CPU time per request of the server process and of the client
threads (what bounds latency on few cores).
`--memory` adds, each in a fresh child process (peak RSS: the kernel's high-water mark VmHWM,
which unlike `getrusage` does not carry the forking parent's peak over exec): preparing a
>= 500 MB generated split (target peak < 500 MB) and the first reset on it with no prebuilt
index (target peak growth < 100 MB); generating that split takes about a minute and a half.

    PYTHONPATH=. .venv/bin/python -m benchmarks.mind2web_env [--memory]

Exit status 1 on a correctness failure, and in full mode on a missed target. `--tiny` (the test
suite's smoke run): tiny pages and splits, the same code path, memory included; targets printed,
not enforced.
"""

from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from benchmarks import snapshot_before
from benchmarks.cli import parse_with_tiny, run_clients
from env.episodes import EpisodeTable
from env.launch import config_arguments, free_port, start_server, stop_process
from env.mind2web import launch
from env.mind2web.episodes import Episode
from env.mind2web.generate import GeneratedData, GenerateSpec, generate
from env.mind2web.prepare import prepare
from env.mind2web.snapshot import build_snapshot
from env.mind2web.snapshot_pool import pool_size
from env.mind2web.store import TaskKey, TaskStore
from env.mind2web.validate import Action, expected_refs
from evolving_rl.config import Config, parse_config
from evolving_rl.domains.mind2web_metrics import REFERENCE_FALLBACK

logger = logging.getLogger("mind2web_env")
TINY = {"small": 20, "large": 200, "tasks": 3, "large_tasks": 2, "clients": 4, "passes": 1,
        "memory": True, "memory_mb": 2, "cold_tasks": 4, "cold_rounds": 1}
PAGE_BASE = 30  # elements of a generated page besides its distractors (about)
MEMORY_DISTRACTORS = 250  # about 0.36 MiB of JSON per task


@dataclass(frozen=True)
class Target:
    name: str
    value: float
    limit: float
    unit: str
    below: bool = False  # strictly below the limit (memory) rather than at most

    @property
    def met(self) -> bool:
        return self.value < self.limit if self.below else self.value <= self.limit

    def line(self) -> str:
        sign = "<" if self.below else "<="
        return (f"{'PASS' if self.met else 'MISS'} {self.name}: {self.value:.1f} {self.unit} "
                f"(target {sign} {self.limit:g} {self.unit})")


@dataclass(frozen=True)
class Replay:
    """One generated task: where it is and the gold action of each step."""

    key: TaskKey
    actions: tuple[Action, ...]


@dataclass
class Tally:
    """Step latencies, episodes won and errors of one run (appends are atomic under the GIL)."""

    steps: list[float] = field(default_factory=list)
    episodes: int = 0
    won: int = 0
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.steps)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0

    @property
    def rate(self) -> float:
        return len(self.steps) / self.wall_s if self.wall_s else 0.0


def task_keys(generated: GeneratedData, spec: GenerateSpec) -> list[TaskKey]:
    """Every generated task as (file relative to the root, index): files of `tasks_per_file`."""
    keys = []
    for number, path in enumerate(generated.files):
        in_file = min(spec.tasks_per_file, spec.tasks - number * spec.tasks_per_file)
        rel = path.relative_to(generated.root).as_posix()
        keys += [TaskKey(rel, index) for index in range(in_file)]
    return keys


def gold_replay(store: TaskStore, key: TaskKey) -> Replay:
    """The gold path of one task: the first ref `judge` accepts at each step under the
    reference's fallback (the servers here run it, so that every episode can be won)."""
    steps = store.task(key).steps
    return Replay(key, tuple(
        Action(step.gold.op,
               expected_refs(step.gold, store.snapshot(key, i), REFERENCE_FALLBACK)[0],
               step.gold.value) for i, step in enumerate(steps)))


def plain_run(store: TaskStore, replays: list[Replay], clients: int, passes: int) -> Tally:
    """(a) The server's step logic called directly: Episode.act + view, the app's locking."""
    table, tally = EpisodeTable(10**6, 3600.0, 1), Tally()

    def play(i: int) -> None:
        replay = replays[i % len(replays)]
        episode = Episode(replay.key, "train", REFERENCE_FALLBACK)
        episode_id = table.add(episode)
        view = episode.view(store, episode_id)
        for action in replay.actions:
            start = time.perf_counter()
            with episode.lock:
                episode.act(store, action)
                view = episode.view(store, episode_id)
            tally.steps.append(time.perf_counter() - start)
        table.pop(episode_id)
        tally.episodes += 1
        tally.won += int(view["won"])

    tally.wall_s = run_clients(clients, passes * len(replays), play)
    return tally


def http_run(url: str, replays: list[Replay], clients: int, passes: int) -> Tally:
    """(b) The same workload through the server, one HTTP session per client thread."""
    tally, local = Tally(), threading.local()

    def post(path: str, payload: dict) -> dict:
        local.session = getattr(local, "session", None) or requests.Session()
        resp = local.session.post(f"{url}{path}", json=payload, timeout=120)
        if resp.status_code != 200:
            raise RuntimeError(f"{path} -> {resp.status_code} {resp.text[:200]}")
        return resp.json()

    def play(i: int) -> None:
        replay = replays[i % len(replays)]
        try:
            view = post("/reset", {"task": {"file": replay.key.file, "index": replay.key.index}})
            for action in replay.actions:
                payload = {"episode_id": view["episode_id"], "action": {
                    "op": action.op, "ref": action.ref, "value": action.value}}
                start = time.perf_counter()
                view = post("/step", payload)
                tally.steps.append(time.perf_counter() - start)
            post("/close", {"episode_id": view["episode_id"]})
            tally.episodes += 1
            tally.won += int(view["won"])
        except (RuntimeError, requests.RequestException) as err:
            tally.errors.append(str(err))

    tally.wall_s = run_clients(clients, passes * len(replays), play)
    return tally


def report(name: str, tally: Tally) -> None:
    logger.info("  %-5s %5d steps %7.1f steps/s  step p50/p99 %7.2f/%7.2f ms  won %d/%d  "
                "errors %d", name, len(tally.steps), tally.rate, tally.pct(.5), tally.pct(.99),
                tally.won, tally.episodes, len(tally.errors))
    for error in tally.errors[:3]:
        logger.info("    error: %s", error)


@dataclass
class Workbench:
    """A generated data root, its server and an in-process store over the same files."""

    cfg: Config
    url: str
    server: psutil.Process
    store: TaskStore
    replays: list[Replay]
    elements: float


def server_config(base: Path, name: str, root: Path, **settings) -> Config:
    """A Mind2Web server config over `root` on a free loopback port, its caches under `base`."""
    values = {"data_root": str(root), "port": free_port(),
              "server_cache_dir": str(base / f"{root.name}_c"),
              "log_dir": str(base / f"{name}_logs"), "capacity": 4096,
              "snapshot_cache_size": 4096, "task_cache_size": 1024,
              "empty_positive_rule": REFERENCE_FALLBACK, **settings}
    return parse_config({"environment": "mind2web", "mind2web": values})


def open_bench(base: Path, name: str, distractors: int, tasks: int,
               started: list[Config]) -> Workbench:
    """Generate `tasks` tasks of ~`distractors` + 30 elements and start their server (its
    config appended to `started` at once, for the caller to stop)."""
    root = base / name
    spec = GenerateSpec(tasks=tasks, distractors=distractors, splits=("train",),
                        tasks_per_file=max(1, tasks // 2))
    generated = generate(root, spec)
    cfg = server_config(base, name, root)
    started.append(cfg)
    server = psutil.Process(launch.start(cfg))
    store = TaskStore(root, cfg.mind2web.server_cache_dir, 1024, 4096)
    replays = [gold_replay(store, key) for key in task_keys(generated, spec)]
    sizes = [len(store.snapshot(r.key, i).entries) for r in replays for i in range(len(r.actions))]
    return Workbench(cfg, f"http://127.0.0.1:{cfg.mind2web.port}", server, store, replays,
                     sum(sizes) / len(sizes))


def compare(bench: Workbench, clients: int, passes: int, won: list[int]) -> Tally:
    """Warm both sides, then time both; the ratio lines; the http tally."""
    logger.info("--- ~%.0f elements per page, %d tasks, %d clients, %d passes", bench.elements,
                len(bench.replays), clients, passes)
    http_run(bench.url, bench.replays, clients, 1)
    plain_run(bench.store, bench.replays, clients, 1)
    cpu = bench.server.cpu_times(), time.process_time()
    http = http_run(bench.url, bench.replays, clients, passes)
    server_s = sum(bench.server.cpu_times()[:2]) - sum(cpu[0][:2])
    client_s = time.process_time() - cpu[1]
    plain = plain_run(bench.store, bench.replays, clients, passes)
    report("http", http)
    requests_made = len(http.steps) + 2 * http.episodes  # steps, resets, closes
    logger.info("  http CPU per request: server %.2f ms, clients %.2f ms (%d requests in %.1f s "
                "wall)", 1000 * server_s / requests_made, 1000 * client_s / requests_made,
                requests_made, http.wall_s)
    report("plain", plain)
    logger.info("ratio http/plain at %d clients, ~%.0f elements: step p50 %.2fx, throughput "
                "%.2fx", clients, bench.elements, http.pct(.5) / max(plain.pct(.5), 1e-6),
                http.rate / max(plain.rate, 1e-9))
    won[0] += http.won + plain.won
    won[1] += len(bench.replays) * passes * 2
    return http


def cold_builds(bench: Workbench) -> float:
    """Median wall seconds of building a page's snapshot from its cleaned_html, nothing cached,
    by today's builder; its median CPU time, and that of the builder before it
    (`benchmarks.snapshot_before`) on the same pages, alternating, for the ratio (CPU time: on a
    busy machine wall time also counts the waits for a core)."""
    pages = [step.cleaned_html for r in bench.replays for step in bench.store.task(r.key).steps]
    wall: list[float] = []
    cpu: dict[Callable, list[float]] = {build_snapshot: [], snapshot_before.build_snapshot: []}
    for page in pages:
        for build, spent in cpu.items():
            start = time.perf_counter(), time.thread_time()
            build(page)
            spent.append(time.thread_time() - start[1])
            if build is build_snapshot:
                wall.append(time.perf_counter() - start[0])
    now, before = (_median(t) for t in cpu.values())
    logger.info("cold snapshot build, %d pages of ~%.0f elements: p50 %.1f ms wall, max %.1f ms, "
                "%.1f ms CPU; the builder before: p50 %.1f ms CPU (%.2fx)", len(pages),
                bench.elements, _median(wall) * 1000, max(wall) * 1000, now * 1000,
                before * 1000, before / max(now, 1e-9))
    return _median(wall)


MISTAKES: tuple[tuple[str, str, object], ...] = (
    ("post", "/reset", b"not json"), ("post", "/reset", [1, 2]), ("post", "/reset", {}),
    ("post", "/reset", {"task": 5}), ("post", "/reset", {"task": "no-such-id"}),
    ("post", "/reset", {"task": {"file": "../../etc/passwd", "index": 0}}),
    ("post", "/reset", {"task": {"file": "/etc/passwd", "index": 0}}),
    ("post", "/reset", {"task": {"file": "data/train/none.json", "index": 0}}),
    ("post", "/reset", {"task": {"file": "x", "index": -1}}),
    ("post", "/reset", {"task": {"file": "x", "index": True}}),
    ("post", "/reset", {"task": "x" * 10_000}), ("post", "/reset", {"task": "", "mode": "x"}),
    ("post", "/step", {}), ("post", "/step", {"episode_id": 3}),
    ("post", "/step", {"episode_id": "nope", "action": {"op": "CLICK", "ref": "e1"}}),
    ("post", "/step", {"episode_id": "nope", "action": "click e1"}),
    ("post", "/step", {"episode_id": "nope", "action": {"op": "JUMP", "ref": "e1"}}),
    ("post", "/step", {"episode_id": "nope", "action": {"op": "CLICK", "ref": "x1"}}),
    ("post", "/step", {"episode_id": "nope", "action": {"op": "TYPE", "ref": "e1",
                                                        "value": 7}}),
    ("post", "/step", {"episode_id": "n", "action": {"op": "TYPE", "ref": "e1",
                                                     "value": "v" * 200_000}}),
    ("post", "/close", {}), ("post", "/close", {"episode_id": "nope"}),
    ("get", "/reset", None), ("post", "/health", None), ("get", "/nowhere", None),
)


def mistakes(bench: Workbench) -> tuple[int, int]:
    """(requests, answers not as expected) of the battery: each a 4xx; then a wrong step ends a
    train episode (200) and stepping it again is 409."""
    statuses = []
    for method, path, body in MISTAKES:
        kwargs = {"data": body} if isinstance(body, bytes) else {"json": body}
        resp = requests.request(method, f"{bench.url}{path}", timeout=30, **kwargs)
        statuses.append(resp.status_code)
    key = bench.replays[0].key
    view = requests.post(f"{bench.url}/reset", json={"task": {"file": key.file,
                                                              "index": key.index}},
                         timeout=30).json()
    wrong = {"episode_id": view["episode_id"], "action": {"op": "CLICK", "ref": "e9999999"}}
    after = [requests.post(f"{bench.url}/step", json=wrong, timeout=30).status_code
             for _ in range(2)]
    bad = sum(not 400 <= s < 500 for s in statuses) + (after != [200, 409])
    statuses += after
    logger.info("client mistakes: %d requests, %d answered >= 500, %d not as expected "
                "(statuses %s)", len(statuses), sum(s >= 500 for s in statuses), bad,
                sorted(set(statuses)))
    return len(statuses), bad


def _peak_kb() -> int:
    """This process's peak RSS so far, in KiB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def _child_prepare(root: str, out: str, queue: multiprocessing.Queue) -> None:
    before = _peak_kb()
    prepare(root, out, required=("train",))
    queue.put((before, _peak_kb()))


def _child_first_reset(root: str, cache: str, rel: str, queue: multiprocessing.Queue) -> None:
    before = _peak_kb()
    store = TaskStore(root, cache, 256, 1024)
    episode = Episode(store.locate_file(rel, 0), "train")
    episode.view(store, EpisodeTable(1, 60.0, 1).add(episode))
    queue.put((before, _peak_kb()))


def in_child(target: Callable, *args: str) -> tuple[float, float]:
    """(peak RSS MB after start-up, peak RSS MB at the end) of `target` run in a fresh process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    before, after = queue.get(timeout=3600)
    child.join()
    return before / 1024, after / 1024


def generate_split(root: Path, megabytes: float) -> GeneratedData:
    """A train split of about `megabytes` MiB, in one file."""
    tasks = max(1, math.ceil(megabytes * 2.85))
    return generate(root, GenerateSpec(tasks=tasks, distractors=MEMORY_DISTRACTORS,
                                       tasks_per_file=tasks, splits=("train",)))


def memory_targets(base: Path, args) -> list[Target]:
    started = time.perf_counter()
    generated = generate_split(base / "big", args.memory_mb)
    (split_file,) = generated.files
    size = split_file.stat().st_size / 2**20
    logger.info("--- memory: generated a %.0f MiB split in %.0f s", size,
                time.perf_counter() - started)
    root = str(generated.root)
    start_mb, peak_mb = in_child(_child_prepare, root, str(base / "big_prepared"))
    logger.info("prepare of a %.0f MiB split: peak RSS %.0f MB (%.0f MB after start-up)", size,
                peak_mb, start_mb)
    rel = split_file.relative_to(generated.root).as_posix()
    start_mb, end_mb = in_child(_child_first_reset, root, str(base / "big_cache"), rel)
    logger.info("first reset on a %.0f MiB split, no prebuilt index: peak RSS %.0f -> %.0f MB "
                "(growth %.1f MB)", size, start_mb, end_mb, end_mb - start_mb)
    return [Target(f"prepare peak RSS ({size:.0f} MiB split)", peak_mb, 500, "MB", below=True),
            Target(f"first reset peak RSS growth ({size:.0f} MiB split)", end_mb - start_mb,
                   100, "MB", below=True)]


def latency_targets(base: Path, args, won: list[int],
                    started: list[Config]) -> tuple[list[Target], Workbench]:
    small = open_bench(base, "small", args.small, args.tasks, started)
    http = compare(small, args.clients, args.passes, won)
    targets = [Target(f"step p99, ~{small.elements:.0f} elements, {args.clients} clients",
                      http.pct(.99), 26, "ms")]
    large = open_bench(base, "large", args.large, args.large_tasks, started)
    for clients in (1, args.clients):
        http = compare(large, clients, args.passes, won)
        label = f"~{large.elements:.0f} elements, {clients} clients"
        targets += [Target(f"step p50, {label}", http.pct(.5), 20, "ms"),
                    Target(f"step p99, {label}", http.pct(.99), 100, "ms")]
    targets.append(Target(f"cold snapshot build p50, ~{large.elements:.0f} elements",
                          cold_builds(large) * 1000, 50, "ms"))
    return targets, small


COLD_PATHS = ("before", "thread", "pool")


@dataclass
class ColdRun:
    """One cold pass: its tally and the CPU seconds, while it ran, of the server process, of its
    children (the snapshot pool) and of the clients (this process)."""

    tally: Tally
    cpu_s: tuple[float, float, float]  # server, pool, clients

    def cpu_ms_per_step(self, which: int | None = None) -> float:
        spent = sum(self.cpu_s) if which is None else self.cpu_s[which]
        return 1000 * spent / max(len(self.tally.steps), 1)


def _cpu_s(server: psutil.Process) -> tuple[float, float, float]:
    """User + system CPU seconds so far of `server`, of its children and of this process."""
    return (sum(server.cpu_times()[:2]),
            sum(sum(p.cpu_times()[:2]) for p in server.children(recursive=True)),
            time.process_time())


def _cold_pass(base: Path, root: Path, name: str, replays: list[Replay], clients: int,
               started: list[Config]) -> ColdRun:
    """One pass of every replay on a fresh server: every page is cold when its step shows it.
    `before`: the builder before the fused tokenizer (`benchmarks.snapshot_before`), in the
    request thread; `thread`: today's builder in the request thread; `pool`: today's builder in
    the process pool, one process per core."""
    cfg = server_config(base, f"cold_{name}", root,
                        snapshot_processes=-1 if name == "pool" else 0)
    web = cfg.mind2web
    url = f"http://127.0.0.1:{web.port}"
    proc = None
    if name == "before":
        proc = start_server([sys.executable, "-m", "benchmarks.snapshot_before",
                             *config_arguments(cfg)], f"{url}/health",
                            Path(web.log_dir) / "server.log", timeout_s=web.start_timeout_s)
        server = psutil.Process(proc.pid)
    else:
        started.append(cfg)
        server = psutil.Process(launch.start(cfg))
    try:
        before = _cpu_s(server)
        tally = http_run(url, replays, clients, 1)
        return ColdRun(tally, tuple(b - a for a, b in zip(before, _cpu_s(server), strict=True)))
    finally:
        if proc is not None:
            stop_process(proc)
        else:
            launch.stop(cfg)
            started.remove(cfg)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def cold_targets(base: Path, args, won: list[int], started: list[Config]) -> list[Target]:
    """Cold ~5,000-element pages under `clients` clients: the old path (the builder before, in
    the request thread) vs today's builder in the thread and in the process pool."""
    root = base / "cold"
    spec = GenerateSpec(tasks=args.cold_tasks, distractors=args.large, splits=("train",),
                        tasks_per_file=max(1, args.cold_tasks // 2))
    generated = generate(root, spec)
    store = TaskStore(root, base / f"{root.name}_c", 64, 64)  # the servers reuse its index
    replays = [gold_replay(store, key) for key in task_keys(generated, spec)]
    cores = pool_size(-1)
    logger.info("--- cold pages: %d tasks of ~%d elements, %d clients, %d rounds, %d cores "
                "(the pool: one process per core)", len(replays), args.large + PAGE_BASE,
                args.clients, args.cold_rounds, cores)
    runs: dict[str, list[ColdRun]] = {name: [] for name in COLD_PATHS}
    for number in range(args.cold_rounds):
        order = COLD_PATHS if number % 2 == 0 else COLD_PATHS[::-1]
        for name in order:
            run = _cold_pass(base, root, name, replays, args.clients, started)
            runs[name].append(run)
            report(f"{name}#{number}"[:8], run.tally)
            won[0] += run.tally.won
            won[1] += len(replays)
    for name, path_runs in runs.items():
        tallies = [r.tally for r in path_runs]
        cpu = [_median([r.cpu_ms_per_step(which) for r in path_runs])
               for which in (None, 0, 1, 2)]
        logger.info("cold pages %-6s medians over %d rounds: step p50/p99 %.0f/%.0f ms, %.1f "
                    "steps/s; CPU per step %.1f ms (server %.1f, pool %.1f, clients %.1f): %d "
                    "clients on %d cores average >= %.0f ms a step", name, args.cold_rounds,
                    _median([t.pct(.5) for t in tallies]), _median([t.pct(.99) for t in tallies]),
                    _median([t.rate for t in tallies]), *cpu, args.clients, cores,
                    cpu[0] * args.clients / cores)
    for new in ("thread", "pool"):
        pairs = list(zip([r.tally for r in runs["before"]], [r.tally for r in runs[new]],
                         strict=True))
        logger.info("ratio before/%s (median of rounds): step p99 %.2fx, step p50 %.2fx; "
                    "throughput %s/before %.2fx", new,
                    _median([b.pct(.99) / max(n.pct(.99), 1e-6) for b, n in pairs]),
                    _median([b.pct(.5) / max(n.pct(.5), 1e-6) for b, n in pairs]), new,
                    _median([n.rate / max(b.rate, 1e-9) for b, n in pairs]))
    return [Target(f"cold-page step p99, ~{args.large + PAGE_BASE} elements, {args.clients} "
                   f"clients, process pool", _median([r.tally.pct(.99) for r in runs["pool"]]),
                   300, "ms")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=270, help="distractors: ~300 elements")
    parser.add_argument("--large", type=int, default=4970, help="distractors: ~5,000 elements")
    parser.add_argument("--tasks", type=int, default=16, help="tasks of the small pages")
    parser.add_argument("--large-tasks", type=int, default=6, help="tasks of the large pages")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--passes", type=int, default=10, help="timed passes over the tasks")
    parser.add_argument("--cold-tasks", type=int, default=16,
                        help="tasks of the cold-page runs (one per client)")
    parser.add_argument("--cold-rounds", type=int, default=3,
                        help="fresh-server rounds of the cold-page comparison")
    parser.add_argument("--memory", action="store_true", help="add the memory measurements")
    parser.add_argument("--memory-mb", type=float, default=520, help="split to prepare")
    args = parse_with_tiny(parser, argv, TINY)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logger.info("%d CPUs, load average %s", os.cpu_count(), os.getloadavg())
    won = [0, 0]
    with tempfile.TemporaryDirectory(prefix="mind2web_bench_") as tmp:
        base = Path(tmp)
        started: list[Config] = []
        try:
            targets, small = latency_targets(base, args, won, started)
            sent, bad = mistakes(small)
            targets += cold_targets(base, args, won, started)
        finally:
            for cfg in started:
                launch.stop(cfg)
        logger.info("gold replay: %d/%d episodes won", won[0], won[1])
        if args.memory:
            targets += memory_targets(base, args)
    for target in targets:
        logger.info("%s", target.line())
    failed = [t for t in targets if not t.met]
    correct = won[0] == won[1] and bad == 0 and sent > 0
    logger.info("targets: %d/%d met; correctness %s", len(targets) - len(failed), len(targets),
                "ok" if correct else "FAILED")
    if not correct or (failed and not args.tiny):
        sys.exit(1)


if __name__ == "__main__":
    main()
