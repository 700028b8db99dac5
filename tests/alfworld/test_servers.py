"""Router + workers as real processes on loopback: play, bad input, capacity, TTL, orphan-free
resets, a killed worker, a second start on busy ports refused, and a stop that leaves no process
behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from env.alfworld import launch
from env.launch import LaunchError, config_arguments, free_port, read_pid, start_server
from evolving_rl.config import parse_config, to_dict
from tests.servers import (
    assert_served_under_hostile_connections,
    health_latencies_under_slow_clients,
)

ROOT = Path(__file__).resolve().parents[2]
SAME_OUTSIDE = "game: must be the path of a game inside the data root, relative to it"


def _wait(predicate, timeout_s: float = 20.0, period_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(period_s)
    return False


@pytest.fixture(scope="module")
def servers(launch_servers):
    return launch_servers(n_workers=2, capacity=4, episode_ttl_s=120)


def test_walkthrough_wins_through_router(servers, alfworld_games):
    for game in list({g.task_type: g for g in reversed(alfworld_games)}.values()):
        view = servers.post("/reset", {"game": game.key}).json()
        assert view["task_type"] == game.task_type and view["task"] and not view["won"]
        assert view["steps"] == 0 and view["admissible_commands"] and view["reward"] == 0.0
        for action in game.walkthrough:
            assert "help" not in view["admissible_commands"]  # as the reference servers list them
            assert view["reward"] == 0.0  # the engine's only reward is the win
            view = servers.post("/step", {"episode_id": view["episode_id"],
                                          "action": action}).json()
        assert view["won"] and view["done"] and view["steps"] == len(game.walkthrough)
        assert view["reward"] == 1.0
        assert servers.post("/close", {"episode_id": view["episode_id"]}).status_code == 200


def _bad_requests(game: str, episode_id: str) -> list[tuple[str, object, int, str | None]]:
    """(path, JSON body or raw bytes, status, field) of every client mistake we answer."""
    return [
        ("/reset", b"{not json", 400, "body"), ("/reset", b"\xff\xfe", 400, "body"),
        ("/reset", b"[" * 5000, 400, "body"), ("/reset", [game], 400, "body"),
        ("/reset", {}, 400, "game"), ("/reset", {"game": ["x"]}, 400, "game"),
        ("/reset", {"game": {"a": 1}}, 400, "game"), ("/reset", {"game": ""}, 400, "game"),
        ("/reset", {"game": game, "timeout_s": "soon"}, 400, "timeout_s"),
        *[("/reset", {"game": game, "timeout_s": small}, 400, "timeout_s")
          for small in (1e-6, 0.0099, 0, -1)],  # a deadline no reset can meet: never a 503
        ("/reset", {"game": game, "timeout_s": 3601}, 400, "timeout_s"),
        ("/reset", {"game": "x" * 300}, 404, "game"),  # over the name limit: no game, no 500
        ("/reset", {"game": f"{'y' * 300}/game.tw-pddl"}, 404, "game"),
        ("/reset", {"game": "x" * 255}, 404, "game"),
        ("/step", {"action": "look"}, 400, "episode_id"),
        ("/step", {"episode_id": [episode_id], "action": "look"}, 400, "episode_id"),
        ("/step", {"episode_id": {"id": episode_id}, "action": "look"}, 400, "episode_id"),
        ("/step", {"episode_id": episode_id}, 400, "action"),
        ("/step", {"episode_id": episode_id, "action": ["look"]}, 400, "action"),
        ("/step", {"episode_id": episode_id, "action": {"a": 1}}, 400, "action"),
        ("/step", {"episode_id": episode_id, "action": 3}, 400, "action"),
        ("/step", {"episode_id": episode_id, "action": "x" * 5000}, 400, "action"),
        ("/step", {"episode_id": "nope", "action": "look"}, 404, "episode_id"),
        ("/close", {"episode_id": None}, 400, "episode_id"),
        ("/close", {"episode_id": "nope"}, 404, "episode_id"),
        *[(path, {"episode_id": forged, "action": "look"}, 404, "episode_id")
          for path in ("/step", "/close") for forged in _forged_ids(episode_id)],
    ]


def _forged_ids(episode_id: str) -> list[str]:
    """Ids of the right shape but for a Unicode digit or a trailing newline, naming a boot that
    never was: the shape check must refuse them (404), not read them as lost episodes (410)."""
    index, _, rest = episode_id.split("-")
    never = "0" * 8
    arabic_indic = "".join(chr(0x0660 + int(d)) for d in index)
    return [f"{arabic_indic}-{never}-{rest}", f"{index}-{never}-{rest}\n",
            f"{index}-{episode_id.split('-')[1]}-{rest}\n"]


def _post_raw(base: str, path: str, body: object) -> requests.Response:
    if isinstance(body, bytes):
        return requests.post(f"{base}{path}", data=body, timeout=30,
                             headers={"Content-Type": "application/json"})
    return requests.post(f"{base}{path}", json=body, timeout=30)


@pytest.mark.parametrize("target", ["router", "worker"])
def test_client_mistakes_get_json_4xx(servers, alfworld_games, alfworld_root, tmp_path, target):
    base = servers.url if target == "router" else servers.worker_url(0)
    game = alfworld_games[0].key
    episode_id = servers.post("/reset", {"game": game}, base=base).json()["episode_id"]
    for path, body, status, field in _bad_requests(game, episode_id):
        resp = _post_raw(base, path, body)
        assert resp.status_code == status, (path, body, resp.text)
        assert resp.json()["error"] and resp.json().get("field") == field, (path, resp.text)
    outside = tmp_path / "secret" / "game.tw-pddl"
    outside.parent.mkdir()
    outside.write_text("{}")
    link = alfworld_root / f"escape-{target}"
    link.symlink_to(outside.parent)
    try:
        for name in ["../../etc/passwd", "../nowhere/game.tw-pddl", str(outside),
                     "/no/such/game.tw-pddl", f"escape-{target}/game.tw-pddl"]:
            resp = _post_raw(base, "/reset", {"game": name})
            assert resp.status_code == 400 and resp.json()["message"] == SAME_OUTSIDE, name
    finally:
        link.unlink()
    limit = servers.cfg.alfworld.max_body_bytes
    for pad in (limit, 3 * limit):  # one limit, one answer (waitress's and the app's alike)
        big = _post_raw(base, "/reset", {"game": game, "pad": "x" * pad})
        assert big.status_code == 413 and big.json() == {
            "error": "body_too_large", "message": f"body over {limit} bytes", "field": "body"}
    surrogate = _post_raw(base, "/reset", {"game": "\ud800/game.tw-pddl"})
    assert surrogate.status_code == 400 and surrogate.json()["field"] == "game"
    assert requests.get(f"{base}/nowhere", timeout=5).json()["error"] == "no_such_route"
    view = servers.post("/step", {"episode_id": episode_id, "action": "look"}, base=base)
    assert view.status_code == 200  # the worker is fine and the episode still plays
    servers.post("/close", {"episode_id": episode_id}, base=base)


@pytest.mark.parametrize("target", ["router", "worker"])
def test_health_is_served_while_200_slow_clients_hold_connections(servers, target):
    base = servers.url if target == "router" else servers.worker_url(0)
    latencies = health_latencies_under_slow_clients(base)
    assert max(latencies) < 2.0, latencies


@pytest.mark.parametrize("target", ["router", "worker"])
def test_normal_clients_are_answered_under_2000_hostile_connections(servers, alfworld_games,
                                                                    target):
    base = servers.url if target == "router" else servers.worker_url(0)

    def reset_and_close() -> bool:
        view = servers.post("/reset", {"game": alfworld_games[0].key}, base=base)
        return view.status_code == 200 and servers.post(
            "/close", {"episode_id": view.json()["episode_id"]}, base=base).status_code == 200

    assert_served_under_hostile_connections(base, reset_and_close)


def _live(servers) -> int:
    return sum(w["live_episodes"] for w in servers.health()["workers"])


def _settled(servers) -> bool:
    """Every worker healthy with no episode open, as the workers count and as the router last
    heard. The router learns of episodes opened and closed on a worker directly only at its next
    health check (every 0.3 s here), and a check that times out, as on a worker still shedding
    2,000 hostile connections, leaves its count behind. In one run a count left 1 high made the
    capacity test's resets meet a 503 before the eighth, and the next test's count start at 1."""
    health = servers.health()
    own = [requests.get(f"{w['url']}/health", timeout=5).json()["live_episodes"]
           for w in health["workers"]]
    return health["ok"] and not any(w["live_episodes"] for w in health["workers"]) \
        and not any(own)


def test_capacity_gives_503_with_retry_after(servers, alfworld_games):
    assert _wait(lambda: _settled(servers)), servers.health()
    game = alfworld_games[1].key
    ids = []
    try:
        for _ in range(8):  # 2 workers x capacity 4
            resp = servers.post("/reset", {"game": game})
            assert resp.status_code == 200, resp.text
            ids.append(resp.json()["episode_id"])
        assert {i.split("-")[0] for i in ids} == {"0", "1"}  # least-loaded placement
        full = servers.post("/reset", {"game": game})
        assert full.status_code == 503 and int(full.headers["Retry-After"]) >= 1
        assert full.json() == {"error": "no_capacity", "message": full.json()["message"],
                               "field": None}  # no field at fault, and said so
        direct = servers.post("/reset", {"game": game}, base=servers.worker_url(0))
        assert direct.status_code == 503 and direct.json()["error"] == "worker_full"
    finally:
        for episode_id in ids:
            servers.post("/close", {"episode_id": episode_id})


def test_abandoned_reset_keeps_no_episode(servers, alfworld_games, fresh_copy):
    assert _wait(lambda: _settled(servers)), servers.health()
    cold = [fresh_copy(alfworld_games[i], "abandoned") for i in range(3)]
    with pytest.raises(requests.exceptions.ReadTimeout):  # client gone: the router closes it
        servers.post("/reset", {"game": cold[0]}, timeout=0.05)
    worker = servers.worker_url(1)
    with pytest.raises(requests.exceptions.ReadTimeout):  # client gone: the worker drops it
        servers.post("/reset", {"game": cold[1]}, timeout=0.05, base=worker)
    assert _wait(lambda: requests.get(f"{worker}/health", timeout=5).json()["dropped_resets"])
    resp = servers.post("/reset", {"game": cold[2], "timeout_s": 0.05})
    assert resp.status_code == 408 and resp.json()["error"] == "reset_abandoned"
    assert _wait(lambda: _live(servers) == 0, timeout_s=10)
    time.sleep(1.0)  # let the health loop refresh; the count must stay put
    assert _live(servers) == 0


def test_short_deadline_reset_flood_queues_one_translation(servers, alfworld_games,
                                                            fresh_copy):
    """A client obeying "retrying soon will be fast" with 10 ms deadlines on a cold game: one
    translation job kept on the worker, not one a try, and its next reset gets the result. A job
    not started when its only waiter's deadline ends is dropped, and the next try submits it
    again (engine.py `_stop_waiting`), so the dropped ones are not counted: in one full run of
    d0c926d the worker counted 2 jobs for the flood, which a drop explains (not reproduced in 3
    runs of the module beside 4 busy loops)."""
    worker = servers.worker_url(0)

    def kept_jobs() -> int:
        health = requests.get(f"{worker}/health", timeout=5).json()
        return health["translator_jobs"] - health["translations_dropped"]

    jobs = kept_jobs()
    game = fresh_copy(alfworld_games[3], "flood")
    statuses = []
    for timeout in [0.01] * 15 + [None]:  # the last one waits as long as the server allows
        resp = servers.post("/reset", {"game": game, "timeout_s": timeout}, base=worker)
        statuses.append(resp.status_code)
        if resp.status_code == 200:  # the game is ready: its episodes are closed at once
            servers.post("/close", {"episode_id": resp.json()["episode_id"]}, base=worker)
    assert set(statuses) <= {200, 408} and statuses[-1] == 200
    assert statuses[0] == 408  # the translator cannot finish in 10 ms
    assert kept_jobs() == jobs + 1


def test_idle_episode_is_evicted(launch_servers, alfworld_games):
    short = launch_servers(n_workers=1, episode_ttl_s=1.0)
    view = short.post("/reset", {"game": alfworld_games[0].key}).json()
    time.sleep(2.5)
    resp = short.post("/step", {"episode_id": view["episode_id"], "action": "look"})
    assert resp.status_code == 404 and resp.json()["error"] == "unknown_episode"


def test_killed_worker_is_respawned_and_its_episodes_lost(servers, alfworld_games):
    game = alfworld_games[2].key
    view = servers.post("/reset", {"game": game}).json()
    index = int(view["episode_id"].split("-")[0])
    worker = servers.health()["workers"][index]
    info = requests.get(f"{worker['url']}/health", timeout=5).json()
    os.kill(worker["pid"], signal.SIGKILL)
    started = time.monotonic()
    resp = servers.post("/step", {"episode_id": view["episode_id"], "action": "look"})
    assert resp.status_code == 410 and resp.json()["error"] == "episode_lost"
    assert time.monotonic() - started < 5
    assert _wait(lambda: servers.health()["ok"]), "worker was not respawned"
    assert servers.health()["workers"][index]["pid"] != worker["pid"]
    again = servers.post("/step", {"episode_id": view["episode_id"], "action": "look"})
    assert again.status_code == 410  # still lost once the worker is back
    _, _, rest = view["episode_id"].split("-")
    forged = servers.post("/step", {"episode_id": f"{index}-{'0' * 8}-{rest}", "action": "look"})
    assert forged.status_code == 404 and forged.json()["error"] == "unknown_episode"  # no boot
    assert _wait(lambda: not any(psutil.pid_exists(p) for p in info["translator_pids"]))
    for _ in range(4):  # new episodes work on every worker again
        fresh = servers.post("/reset", {"game": game}).json()
        step = servers.post("/step", {"episode_id": fresh["episode_id"], "action": "look"})
        assert step.status_code == 200
        servers.post("/close", {"episode_id": fresh["episode_id"]})


def test_stop_leaves_no_process(launch_servers, alfworld_games):
    own = launch_servers(n_workers=2)
    own.post("/reset", {"game": alfworld_games[0].key})  # starts a translator process too
    router = psutil.Process(own.health()["pid"])
    family = [router, *router.children(recursive=True)]
    assert len(family) >= 4
    assert launch.stop(own.cfg) >= 1
    gone, alive = psutil.wait_procs(family, timeout=15)
    assert not alive, alive
    assert not list(own.log_dir.glob("*.pid"))


def test_a_second_router_on_busy_worker_ports_is_refused_and_touches_nothing(servers):
    """`start` beside a running router, its own router port free but the same worker ports:
    exit 2 naming the busy ports, before any PID file is written, overwritten or deleted."""
    names = sorted(path.name for path in servers.log_dir.iterdir())
    files = {path.name: path.read_bytes() for path in servers.log_dir.glob("*.pid")}
    router, *workers = launch.bound_ports(servers.cfg)
    assert set(files) == {f"router-{router}.pid", *(f"worker-{port}.pid" for port in workers)}
    other = free_port(exclude=launch.bound_ports(servers.cfg))
    done = subprocess.run(
        [sys.executable, "-m", "env.alfworld.launch", "start", *config_arguments(servers.cfg),
         "--set", f"alfworld.port={other}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and ", ".join(map(str, workers)) in errors[0], done.stderr
    assert str(other) not in errors[0]
    assert sorted(path.name for path in servers.log_dir.iterdir()) == names
    assert {path.name: path.read_bytes() for path in servers.log_dir.glob("*.pid")} == files
    assert servers.health()["ok"]
    assert servers.health()["pid"] == int(files[f"router-{router}.pid"])


def test_runs_sharing_a_log_dir_keep_their_own_pid_files(launch_servers, tmp_path):
    """Two routers on other ports with one `log_dir` (the default one is shared by every
    config): each process has its own PID file, and stopping one run leaves the other
    stoppable by its launcher."""
    shared = tmp_path / "shared_logs"
    first = launch_servers(n_workers=1, log_dir=str(shared))
    second = launch_servers(n_workers=1, log_dir=str(shared))
    family = [psutil.Process(run.health()["pid"]) for run in (first, second)]
    pids = {path.name: read_pid(path) for path in shared.glob("*.pid")}
    assert len(pids) == 4 and len(set(pids.values())) == 4
    assert launch.stop(second.cfg) >= 1
    assert first.health()["ok"] and len(list(shared.glob("*.pid"))) == 2
    assert launch.stop(first.cfg) >= 1
    _, alive = psutil.wait_procs(family, timeout=15)
    assert not alive and not list(shared.glob("*.pid"))


def test_a_router_racing_past_the_port_check_never_adopts_another_runs_workers(servers,
                                                                               tmp_path):
    """Two launchers at the same moment both pass the port check; the second router's workers
    then fail to bind the first one's worker ports. The health wait must not take the first
    run's workers (their PIDs) for its own: the second start fails, the first run is untouched."""
    pids = {path.name: read_pid(path) for path in servers.log_dir.glob("*.pid")}
    other = free_port(exclude=launch.bound_ports(servers.cfg))
    data = to_dict(servers.cfg)
    data["alfworld"].update(port=other, log_dir=str(tmp_path / "logs"), start_timeout_s=20)
    cfg = parse_config(data)
    cmd = [sys.executable, "-m", launch.ROUTER_MODULE, *config_arguments(cfg)]
    with pytest.raises(LaunchError, match="exited with code"):
        proc = start_server(cmd, f"http://127.0.0.1:{other}/health", tmp_path / "router.log",
                            timeout_s=60)
        launch.stop(cfg)  # the old behaviour: it came up on the first run's workers
        proc.wait(30)
    assert {path.name: read_pid(path) for path in servers.log_dir.glob("*.pid")} == pids
    assert not list((tmp_path / "logs").glob("*.pid"))
    assert servers.health()["ok"]
    assert [w["pid"] for w in servers.health()["workers"]] == [
        pids[f"worker-{port}.pid"] for port in launch.bound_ports(servers.cfg)[1:]]
