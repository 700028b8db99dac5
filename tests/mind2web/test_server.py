"""The Mind2Web env server as a real process, started and stopped through its launcher: gold
replay wins every generated task under the reference's empty-positive fallback, and under the
standard rule scores no element on steps without a positive candidate; train mode stops at the
first wrong step, eval mode is teacher-forced, every client mistake is a 4xx naming its field,
capacity gives 503."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from env import launch as env_launch
from env.http_server import STOP_GRACE_S
from env.launch import LaunchError, free_port, health_ok, read_pid
from env.mind2web import launch
from env.mind2web.prepare import prepare
from env.mind2web.server import log_file, pid_file
from env.mind2web.snapshot import build_snapshot
from env.mind2web.store import LRU, OUTSIDE, TaskDataError, TaskStore, check_prepared
from env.mind2web.validate import GoldStep, expected_refs
from env.wire import WireError
from evolving_rl.config import Config, parse_config
from evolving_rl.domains.mind2web_metrics import REFERENCE_FALLBACK
from tests.servers import (
    assert_served_under_hostile_connections,
    health_latencies_under_slow_clients,
)


@dataclass(frozen=True)
class Server:
    url: str
    cfg: Config

    def post(self, path: str, payload: object) -> requests.Response:
        return requests.post(f"{self.url}{path}", json=payload, timeout=30)

    def reset(self, task: object, mode: str = "train") -> dict:
        resp = self.post("/reset", {"task": task, "mode": mode})
        assert resp.status_code == 200, resp.text
        return resp.json()


@dataclass(frozen=True)
class TaskCase:
    file: str
    index: int
    data: dict

    def gold(self, step: int) -> GoldStep:
        action = self.data["actions"][step]
        return GoldStep(action["operation"]["op"], action["operation"]["value"],
                        frozenset(c["backend_node_id"] for c in action["pos_candidates"]),
                        self.data["action_reprs"][step])

    def has_positive(self, step: int) -> bool:
        return bool(self.data["actions"][step]["pos_candidates"])

    def _acted(self, step: int) -> list[str]:
        """The refs of the acted element (found from the action repr where no positive is)."""
        snapshot = build_snapshot(self.data["actions"][step]["cleaned_html"])
        return expected_refs(self.gold(step), snapshot, REFERENCE_FALLBACK)

    def gold_action(self, step: int) -> dict:
        operation = self.data["actions"][step]["operation"]
        return {"op": operation["original_op"], "ref": self._acted(step)[0],
                "value": operation["value"]}

    def wrong_action(self, step: int) -> dict:
        snapshot = build_snapshot(self.data["actions"][step]["cleaned_html"])
        good = set(self._acted(step))
        ref = next(e.ref for e in snapshot.elements if e.ref not in good)
        return {**self.gold_action(step), "ref": ref}


@pytest.fixture(scope="module")
def tasks(mind2web_prepared) -> list[TaskCase]:
    root = mind2web_prepared.root
    cases = [TaskCase(path.relative_to(root).as_posix(), i, task)
             for path in sorted(root.rglob("*.json"))
             for i, task in enumerate(json.loads(path.read_text()))]
    assert {c.file.split("/")[1] for c in cases} == {"train", "test_task", "test_website",
                                                     "test_domain"}
    assert any(not a["pos_candidates"] for c in cases for a in c.data["actions"])
    return cases


@pytest.fixture(scope="module")
def start_server(tmp_path_factory, mind2web_prepared) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def _start(**settings) -> Server:
        run = tmp_path_factory.mktemp("mind2web_server")
        values = {"data_root": str(mind2web_prepared.root), "port": free_port(),
                  "prepared_dir": str(mind2web_prepared.prepared_dir),
                  "server_cache_dir": str(run / "cache"), "log_dir": str(run / "logs"),
                  "start_timeout_s": 120, **settings}
        cfg = parse_config({"environment": "mind2web", "mind2web": values})
        launch.start(cfg)
        server = Server(f"http://127.0.0.1:{values['port']}", cfg)
        started.append(server)
        return server

    yield _start
    for server in started:
        launch.stop(server.cfg)


@pytest.fixture(scope="module")
def server(start_server) -> Server:
    return start_server(capacity=4)


def test_health_counts_every_task(start_server, tasks):
    """On a server of its own: the module's server keeps episodes other tests left open (in a
    random order this test once ran after `test_capacity_gives_503_with_retry_after`)."""
    server = start_server(capacity=4)
    body = requests.get(f"{server.url}/health", timeout=5).json()
    assert body["status"] == "ok" and body["tasks"] == len(tasks) and body["episodes"] == 0


def test_gold_replay_wins_every_task_under_the_reference_fallback(start_server, tasks):
    server = start_server(empty_positive_rule="reference_fallback")
    for number, case in enumerate(tasks):
        by_file = number % 2 == 1
        view = server.reset({"file": case.file, "index": case.index} if by_file
                            else case.data["annotation_id"])
        assert view["task_id"] == case.data["annotation_id"]
        assert view["task"] == case.data["confirmed_task"]
        assert view["n_steps"] == len(case.data["actions"])
        for step in range(view["n_steps"]):
            assert view["step"] == step and not view["done"]
            assert view["previous_actions"] == case.data["action_reprs"][:step]
            page = case.data["actions"][step]["cleaned_html"]
            assert view["observation"] == build_snapshot(page).text
            resp = server.post("/step", {"episode_id": view["episode_id"],
                                         "action": case.gold_action(step)})
            assert resp.status_code == 200, resp.text
            view = resp.json()
            assert view["result"]["correct"], (case.data["annotation_id"], step, view["result"])
        assert view["done"] and view["won"] and view["steps_correct"] == view["n_steps"]
        assert server.post("/close", {"episode_id": view["episode_id"]}).status_code == 200


def test_standard_rule_scores_no_element_where_no_positive_is(server, tasks):
    """Gold replay, teacher forced: a step without a positive candidate is wrong (its
    operation still scores F1 1), so only tasks without such a step are won."""
    for case in tasks:
        view = server.reset(case.data["annotation_id"], mode="eval")
        for step in range(view["n_steps"]):
            view = server.post("/step", {"episode_id": view["episode_id"],
                                         "action": case.gold_action(step)}).json()
            result = view["result"]
            assert result["correct"] is result["element_correct"] is case.has_positive(step)
            assert result["match"] == ("positive" if case.has_positive(step) else "fuzzy")
            assert result["op_f1"] == 1.0
        n = view["n_steps"]
        assert view["won"] is all(case.has_positive(i) for i in range(n))
        assert view["steps_correct"] == sum(case.has_positive(i) for i in range(n))
        server.post("/close", {"episode_id": view["episode_id"]})


def test_train_mode_ends_at_the_first_wrong_step(server, tasks):
    case = next(c for c in tasks if len(c.data["actions"]) >= 2)
    view = server.reset(case.data["annotation_id"])
    view = server.post("/step", {"episode_id": view["episode_id"],
                                 "action": case.gold_action(0)}).json()
    view = server.post("/step", {"episode_id": view["episode_id"],
                                 "action": case.wrong_action(1)}).json()
    assert view["done"] and not view["won"] and view["step"] == 1
    assert view["steps_correct"] == 1 and view["result"]["match"] == "none"
    again = server.post("/step", {"episode_id": view["episode_id"],
                                  "action": case.gold_action(1)})
    assert again.status_code == 409 and again.json()["field"] == "episode_id"
    server.post("/close", {"episode_id": view["episode_id"]})


def test_eval_mode_is_teacher_forced(server, tasks):
    case = next(c for c in tasks if len(c.data["actions"]) >= 3)
    n = len(case.data["actions"])
    view = server.reset(case.data["annotation_id"], mode="eval")
    wrong_value = {**case.gold_action(0), "op": "TYPE", "value": "nothing like it"}
    view = server.post("/step", {"episode_id": view["episode_id"], "action": wrong_value}).json()
    assert not view["result"]["correct"] and not view["done"] and view["step"] == 1
    assert view["previous_actions"] == case.data["action_reprs"][:1]
    for step in range(1, n):
        view = server.post("/step", {"episode_id": view["episode_id"],
                                     "action": case.gold_action(step)}).json()
        assert view["result"]["correct"]
    assert view["done"] and not view["won"] and view["steps_correct"] == n - 1
    server.post("/close", {"episode_id": view["episode_id"]})


def _raw(server: Server, head: str) -> tuple[int, bytes]:
    """Status and body of a hand-written request (one the HTTP clients refuse to send)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2]


def test_client_mistakes_get_json_4xx_naming_the_field(server, tasks):
    task_id = tasks[0].data["annotation_id"]
    episode_id = server.reset(task_id)["episode_id"]
    good = tasks[0].gold_action(0)
    cases = [
        ("/reset", [], 400, "body"), ("/reset", {}, 400, "task"),
        ("/reset", {"task": 5}, 400, "task"), ("/reset", {"task": ""}, 400, "task"),
        ("/reset", {"task": "no-such-id"}, 404, "task"),
        ("/reset", {"task": {"file": 3, "index": 0}}, 400, "task.file"),
        ("/reset", {"task": {"file": tasks[0].file}}, 400, "task.index"),
        ("/reset", {"task": {"file": tasks[0].file, "index": True}}, 400, "task.index"),
        ("/reset", {"task": {"file": tasks[0].file, "index": -1}}, 400, "task.index"),
        ("/reset", {"task": {"file": tasks[0].file, "index": 999}}, 404, "task.index"),
        ("/reset", {"task": {"file": "data/train/none.json", "index": 0}}, 404, "task.file"),
        ("/reset", {"task": task_id, "mode": "play"}, 400, "mode"),
        ("/step", {"action": good}, 400, "episode_id"),
        ("/step", {"episode_id": 7, "action": good}, 400, "episode_id"),
        ("/step", {"episode_id": "nope", "action": good}, 404, "episode_id"),
        ("/step", {"episode_id": episode_id}, 400, "action"),
        ("/step", {"episode_id": episode_id, "action": "CLICK e1"}, 400, "action"),
        ("/step", {"episode_id": episode_id, "action": {**good, "op": "DRAG"}}, 400,
         "action.op"),
        ("/step", {"episode_id": episode_id, "action": {**good, "op": None}}, 400, "action.op"),
        ("/step", {"episode_id": episode_id, "action": {**good, "ref": "12"}}, 400,
         "action.ref"),
        ("/step", {"episode_id": episode_id, "action": {**good, "ref": "e1\u0661"}}, 400,
         "action.ref"),  # an Arabic-Indic digit is no ref digit
        ("/step", {"episode_id": episode_id, "action": {**good, "value": 3}}, 400,
         "action.value"),
        ("/close", {"episode_id": None}, 400, "episode_id"),
        ("/close", {"episode_id": "nope"}, 404, "episode_id"),
        ("/reset", {"task": {"file": "\ud800", "index": 0}}, 400, "task.file"),
        ("/step", {"episode_id": episode_id, "action": {**good, "value": "a\udfff"}}, 400,
         "action.value"),
    ]
    for path, body, status, field in cases:
        resp = server.post(path, body)
        assert resp.status_code == status, (path, body, resp.text)
        assert resp.json()["error"] and resp.json().get("field") == field, (path, resp.text)
    bad_json = requests.post(f"{server.url}/reset", data=b"{no", timeout=10)
    assert bad_json.status_code == 400 and bad_json.json()["field"] == "body"
    limit = server.cfg.mind2web.max_body_bytes
    for pad in (limit, 3 * limit):  # one limit, one answer (waitress's and the app's alike)
        big = server.post("/reset", {"task": task_id, "pad": "x" * pad})
        assert big.status_code == 413 and big.json() == {
            "error": "body_too_large", "message": f"body over {limit} bytes", "field": "body"}
    # waitress answers these itself, before the app, in the same JSON shape
    status, body = _raw(server, "POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n"
                                "Connection: close")
    assert status == 400 and "Content-Length" in json.loads(body)["message"]
    assert requests.get(f"{server.url}/nowhere", timeout=5).status_code == 404
    view = server.post("/step", {"episode_id": episode_id, "action": good})
    assert view.status_code == 200 and view.json()["result"]["correct"]
    server.post("/close", {"episode_id": episode_id})


def test_health_is_served_while_200_slow_clients_hold_connections(server):
    latencies = health_latencies_under_slow_clients(server.url)
    assert max(latencies) < 2.0, latencies
    assert requests.get(f"{server.url}/health", timeout=5).status_code == 200


def test_normal_clients_are_answered_under_2000_hostile_connections(server, tasks):
    def reset_and_close() -> bool:
        view = server.post("/reset", {"task": tasks[0].data["annotation_id"]})
        return view.status_code == 200 and server.post(
            "/close", {"episode_id": view.json()["episode_id"]}).status_code == 200

    assert_served_under_hostile_connections(server.url, reset_and_close)


def test_task_files_outside_the_root_get_one_answer(server, mind2web_prepared, tmp_path):
    outside = tmp_path / "secret.json"
    outside.write_text("[]")
    link = mind2web_prepared.root / "escape"
    link.symlink_to(tmp_path)
    try:
        for name in ["../../etc/passwd", "../secret.json", str(outside), "/no/such.json",
                     "escape/secret.json", "data/../../x.json"]:
            resp = server.post("/reset", {"task": {"file": name, "index": 0}})
            assert resp.status_code == 400 and resp.json()["message"] == OUTSIDE, name
            assert resp.json()["field"] == "task.file"
    finally:
        link.unlink()


def test_capacity_gives_503_with_retry_after(server, tasks):
    task_id = tasks[0].data["annotation_id"]
    ids = [server.reset(task_id)["episode_id"] for _ in range(4)]
    try:
        full = server.post("/reset", {"task": task_id})
        assert full.status_code == 503 and int(full.headers["Retry-After"]) >= 1
    finally:
        for episode_id in ids:
            server.post("/close", {"episode_id": episode_id})
    server.reset(task_id)  # room again (left for the idle TTL of this module's server)


def test_idle_episodes_are_evicted_and_stop_leaves_no_process(start_server, tasks):
    server = start_server(episode_ttl_s=0.5)
    episode_id = server.reset(tasks[0].data["annotation_id"])["episode_id"]
    deadline = time.monotonic() + 10
    while requests.get(f"{server.url}/health", timeout=5).json()["episodes"] and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    resp = server.post("/step", {"episode_id": episode_id, "action": tasks[0].gold_action(0)})
    assert resp.status_code == 404
    path = pid_file(server.cfg.mind2web)
    pid = read_pid(path)
    assert pid is not None and launch.stop(server.cfg)
    assert not Path(path).exists() and not health_ok(f"{server.url}/health", 1.0)
    assert not Path(f"/proc/{pid}").exists() or b"env.mind2web" not in Path(
        f"/proc/{pid}/cmdline").read_bytes()


def test_servers_sharing_a_log_dir_keep_their_own_pid_files(start_server, tmp_path):
    """Two servers on other ports with one `log_dir`: stopping one leaves the other's PID file,
    so its launcher still stops it."""
    shared = str(tmp_path / "shared_logs")
    first, second = start_server(log_dir=shared), start_server(log_dir=shared)
    pid = read_pid(pid_file(first.cfg.mind2web))
    assert pid is not None and pid != read_pid(pid_file(second.cfg.mind2web))
    assert launch.stop(second.cfg) and health_ok(f"{first.url}/health")
    assert launch.stop(first.cfg) and not health_ok(f"{first.url}/health", 1.0)
    assert not list(Path(shared).glob("*.pid"))


def test_lru_keeps_the_most_recent(tmp_path):
    loads: list[int] = []
    cache = LRU(2, lambda key: loads.append(key) or key * 10)
    assert [cache.get(k) for k in (1, 2, 1, 3, 1, 2)] == [10, 20, 10, 30, 10, 20]
    assert loads == [1, 2, 3, 2] and len(cache) == 2


def test_index_is_built_once_and_rebuilt_when_the_source_changes(mind2web_generated, tmp_path):
    root = tmp_path / "root"
    (root / "data" / "train").mkdir(parents=True)
    source = next(p for p in mind2web_generated.files if p.suffix == ".json")
    target = root / "data" / "train" / source.name
    target.write_bytes(source.read_bytes())
    first = TaskStore(root, tmp_path / "cache", 4, 4)
    count = len(json.loads(source.read_text()))
    assert len(first) == count
    built = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()}
    assert len(built) == 2 and not list((tmp_path / "cache").glob("*.tmp"))  # lines, offsets
    assert len(TaskStore(root, tmp_path / "cache", 4, 4)) == count
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()} == built
    tasks = json.loads(source.read_text())
    target.write_text(json.dumps(tasks[:1]))
    again = TaskStore(root, tmp_path / "cache", 4, 4)
    assert len(again) == 1
    key = again.locate_id(tasks[0]["annotation_id"])
    assert again.task(key).confirmed_task == tasks[0]["confirmed_task"]


def test_a_task_id_in_two_files_stops_the_store_naming_both(mind2web_prepared, tmp_path):
    root = Path(shutil.copytree(mind2web_prepared.root, tmp_path / "root"))
    train = sorted((root / "data" / "train").glob("*.json"))[0]
    shutil.copy(train, root / "data" / "test_task" / train.name)
    with pytest.raises(TaskDataError, match=f"data/test_task/{train.name} and "
                                            f"data/train/{train.name}"):
        TaskStore(root, tmp_path / "cache", 4, 4)


def test_only_the_split_folders_hold_task_files(mind2web_prepared, tmp_path):
    """A JSON list of tasks elsewhere under the root (a backup, notes, a manifest) is no task
    file: not served, not a duplicate."""
    root = Path(shutil.copytree(mind2web_prepared.root, tmp_path / "root"))
    count = len(TaskStore(root, tmp_path / "cache", 4, 4))
    train = sorted((root / "data" / "train").glob("*.json"))[0]
    shutil.copytree(root / "data" / "train", root / "data" / "a_backup")
    (root / "notes.json").write_text(json.dumps([{"annotation_id": "note-1", "actions": []}]))
    (root / "data" / "broken.json").write_text('[{"annotation_id": ')
    store = TaskStore(root, tmp_path / "cache", 4, 4)
    assert len(store) == count
    for name in ("notes.json", f"data/a_backup/{train.name}"):
        with pytest.raises(WireError, match="no task file of that name"):
            store.locate_file(name, 0)


def _start_refused(root: Path, tmp_path: Path, prepared_dir: Path) -> str:
    """A server over `root` must exit 2 before it is healthy; the error line of its log."""
    values = {"data_root": str(root), "port": free_port(), "log_dir": str(tmp_path / "logs"),
              "prepared_dir": str(prepared_dir),
              "server_cache_dir": str(tmp_path / "cache"), "start_timeout_s": 120}
    cfg = parse_config({"environment": "mind2web", "mind2web": values})
    with pytest.raises(LaunchError, match="exited with code 2"):
        launch.start(cfg)
    log = log_file(cfg.mind2web).read_text()
    assert "Traceback" not in log, log
    (line,) = [line for line in log.splitlines() if "error" in line.lower()]
    return line


def test_a_server_over_duplicate_ids_never_gets_healthy(mind2web_prepared, tmp_path):
    root = Path(shutil.copytree(mind2web_prepared.root, tmp_path / "root"))
    train = sorted((root / "data" / "train").glob("*.json"))[0]
    shutil.copy(train, root / "data" / "test_task" / train.name)
    line = _start_refused(root, tmp_path, tmp_path / "no_prepared")
    assert "error: task " in line and "data/test_task/" in line and "data/train/" in line


def test_a_truncated_task_file_stops_the_server_naming_file_and_line(mind2web_prepared,
                                                                     tmp_path):
    root = Path(shutil.copytree(mind2web_prepared.root, tmp_path / "root"))
    train = sorted((root / "data" / "train").glob("*.json"))[0]
    text = json.dumps(json.loads(train.read_text()), indent=1)
    cut = text[:len(text) // 2]
    train.write_text(cut)
    line = _start_refused(root, tmp_path, tmp_path / "no_prepared")
    assert f"{train}:{cut.count(chr(10)) + 1}: invalid JSON" in line, line


def test_a_truncated_manifest_stops_the_server_naming_file_and_line(mind2web_prepared, tmp_path):
    root, prepared = _copy_and_prepare(mind2web_prepared, tmp_path)
    manifest = prepared / "manifest.json"
    text = manifest.read_text()
    manifest.write_text(text[:len(text) // 2])
    line = _start_refused(root, tmp_path, prepared)
    assert f"{manifest}:" in line and "invalid JSON" in line and "prepare_data.sh" in line, line


def _copy_and_prepare(mind2web_prepared, tmp_path: Path) -> tuple[Path, Path]:
    root = Path(shutil.copytree(mind2web_prepared.root, tmp_path / "root"))
    prepare(root, tmp_path / "prepared")  # the zip is extracted already
    return root, tmp_path / "prepared"


def test_links_are_not_followed_and_the_prepared_splits_must_be_served(mind2web_prepared,
                                                                       tmp_path):
    root, prepared = _copy_and_prepare(mind2web_prepared, tmp_path)
    store = TaskStore(root, tmp_path / "cache", 4, 4)
    check_prepared(store, prepared)  # the splits' files, unchanged: served
    train = root / "data" / "train"
    shutil.move(train, tmp_path / "train_real")
    train.symlink_to(tmp_path / "train_real")
    linked = TaskStore(root, tmp_path / "cache", 4, 4)
    assert len(linked) < len(store)
    with pytest.raises(TaskDataError, match="data/train/.* is not served"):
        check_prepared(linked, prepared)


def test_a_prepared_split_that_lost_lines_stops_the_server_and_is_prepared_again(
        mind2web_prepared, tmp_path):
    root, prepared = _copy_and_prepare(mind2web_prepared, tmp_path)
    train = prepared / "train.jsonl"
    lines = train.read_text().splitlines(keepends=True)
    train.write_text("".join(lines[:-2]))  # two whole tasks gone, every line still valid
    store = TaskStore(root, tmp_path / "cache", 4, 4)
    with pytest.raises(TaskDataError) as refused:
        check_prepared(store, prepared)
    assert str(refused.value) == (
        f"{train} holds {len(lines) - 2} lines but {prepared / 'manifest.json'} says "
        f"{len(lines)}: the file lost or gained lines since it was prepared; prepare the data "
        "again")
    prepare(root, prepared)  # not "up to date": the split is written again
    assert len(train.read_text().splitlines()) == len(lines)
    check_prepared(store, prepared)


def test_prepared_rows_from_a_copied_root_are_served_and_a_changed_file_stops_the_server(
        mind2web_prepared, tmp_path):
    """A data folder prepared at one place and copied to another (a GPU node: the tar there kept
    mtimes to the second, 2026-12-07) is the same data: served. A file whose content changed is
    not, whatever its size; nor one of another size."""
    root, prepared = _copy_and_prepare(mind2web_prepared, tmp_path)
    moved = Path(shutil.copytree(root, tmp_path / "elsewhere", copy_function=shutil.copyfile))
    source = sorted((moved / "data" / "test_task").glob("*.json"))[0]
    assert source.stat().st_mtime_ns != (root / source.relative_to(moved)).stat().st_mtime_ns
    check_prepared(TaskStore(moved, tmp_path / "cache2", 4, 4), prepared)
    text = source.read_text()
    at = text.index('"confirmed_task": "') + len('"confirmed_task": "')
    source.write_text(text[:at] + text[at].swapcase() + text[at + 1:])  # same size, other text
    assert text[at].isalpha() and source.stat().st_size == len(text.encode())
    with pytest.raises(TaskDataError, match=f"data/test_task/{source.name} changed since"):
        check_prepared(TaskStore(moved, tmp_path / "cache3", 4, 4), prepared)
    source.write_text(json.dumps(json.loads(text)[:1]))
    with pytest.raises(TaskDataError, match=f"data/test_task/{source.name} changed since"):
        check_prepared(TaskStore(moved, tmp_path / "cache4", 4, 4), prepared)


def test_sigterm_answers_every_request_already_sent(mind2web_prepared, tmp_path):
    """32 requests sent while the server is stopped (SIGSTOP: they wait in the listening
    socket's backlog and the connections' buffers, none read yet), then SIGTERM and SIGCONT:
    every one is answered 200 before the server exits 0."""
    port = free_port()
    values = {"data_root": str(mind2web_prepared.root), "port": port,
              "prepared_dir": str(mind2web_prepared.prepared_dir), "threads": 4,
              "server_cache_dir": str(tmp_path / "cache"), "log_dir": str(tmp_path / "logs")}
    cfg = parse_config({"environment": "mind2web", "mind2web": values})
    cmd = [sys.executable, "-m", launch.MODULE, *env_launch.config_arguments(cfg)]
    proc = env_launch.start_server(cmd, f"http://127.0.0.1:{port}/health",
                                   tmp_path / "server.log", timeout_s=120)
    request = (f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               "Connection: close\r\n\r\n").encode()
    sockets: list[socket.socket] = []
    try:
        proc.send_signal(signal.SIGSTOP)
        for _ in range(32):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(request)
            sockets.append(sock)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        answers = [_read_answer(sock) for sock in sockets]
        assert proc.wait(STOP_GRACE_S + 10) == 0
    finally:
        for sock in sockets:
            sock.close()
        env_launch.stop_process(proc)
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 32


def _read_answer(sock: socket.socket) -> bytes:
    """Everything the server sent until it closed; b"reset" when it reset the connection."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        return b"reset"
    return b"".join(chunks)
