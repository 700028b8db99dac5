"""The probe environment (issue 44): its seeded tasks, the prepared splits, the env server over
real HTTP (started and stopped by its launcher), the adapter against that server, and dense
retrieval over the hidden kind's questions returning tasks of the same family."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
import requests

from env.launch import free_port, read_pid
from env.probe.server import pid_file
from env.probe.service import prepare_data
from evolving_rl.clients.env import EnvClient
from evolving_rl.config import Config, parse_config
from evolving_rl.config.schema import ProbeConfig
from evolving_rl.core.actions import ActionStatus
from evolving_rl.domains.base import Turn, WrittenSkills
from evolving_rl.domains.probe import ProbeAdapter, choose_answer
from evolving_rl.domains.probe_tasks import family_answers, make_task, split_rows, task_for
from evolving_rl.domains.registry import domain_for

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = ProbeConfig(kind="hidden", n_families=4, train_tasks=16, valid_tasks=8, seed=3)


def _config(folder: Path, kind: str = "stated", **probe: object) -> Config:
    port = free_port()
    return parse_config({
        "environment": "probe",
        "probe": {"kind": kind, "port": port, "log_dir": str(folder / "logs"),
                  "prepared_dir": str(folder / "prepared"), "capacity": 8, **probe},
        "retrieval": {"port": free_port(exclude=[port]), "cache_path": str(folder / "c.npz")},
        "clients": {"env_timeout_s": 10.0, "max_retries": 0}}, "test")


def test_tasks_are_a_function_of_seed_and_id():
    stated = ProbeConfig(seed=5)
    task = make_task(stated, "train", 7)
    assert task == make_task(stated, "train", 7) == task_for(stated, task.id)
    assert task.observation().endswith(f"The winning answer is {task.answer}")
    answers = [make_task(stated, "train", i).answer for i in range(64)]
    assert set(answers) == {1, 2, 3, 4}  # every answer wins somewhere
    assert [make_task(ProbeConfig(seed=6), "train", i).answer for i in range(64)] != answers
    for bad in ("stated-train-0064", "hidden-train-f00-0000", "stated-test-0001", "x"):
        assert task_for(stated, bad) is None


def test_hidden_families_share_an_answer_that_only_feedback_reveals():
    train = [make_task(HIDDEN, "train", i) for i in range(HIDDEN.train_tasks)]
    valid = [make_task(HIDDEN, "valid", i) for i in range(HIDDEN.valid_tasks)]
    for family in {t.family for t in train}:
        members = [t for t in train if t.family == family]
        assert len({t.answer for t in members}) == 1 and len(members) == 4
        assert all(t.family_name in t.question for t in members)
    assert not {t.family for t in train} & {t.family for t in valid}  # held-out families
    task = train[0]
    assert "winning answer is" not in task.observation()
    assert f"answer is {task.answer}" in task.feedback("9")
    row = json.dumps(split_rows(HIDDEN, "train"))
    assert "answer\"" not in row and "winning answer is" not in row


@pytest.mark.parametrize("families, answers", [(16, 4), (8, 2), (6, 4)])
def test_balanced_family_answers_give_each_answer_its_share(families, answers):
    cfg = ProbeConfig(kind="hidden", n_families=families, n_answers=answers, train_tasks=64,
                      valid_tasks=64, family_answers="balanced", seed=1)
    for split in ("train", "valid"):
        by_family = {t.family: t.answer for t in (make_task(cfg, split, i) for i in range(64))}
        counts = Counter(by_family.values())
        assert len(by_family) == families and set(counts) == set(range(1, answers + 1))
        assert max(counts.values()) - min(counts.values()) <= 1
    other_seed = ProbeConfig(**{**cfg.__dict__, "seed": 2})
    assert family_answers(other_seed) != family_answers(cfg)


def test_written_cards_state_each_familys_answer_or_a_wrong_one():
    rows = split_rows(HIDDEN, "valid") + split_rows(HIDDEN, "train")
    for card in ("correct", "wrong"):
        cfg = ProbeConfig(**{**HIDDEN.__dict__, "written_card": card})
        adapter = ProbeAdapter(cfg=cfg)
        assert isinstance(adapter, WrittenSkills)
        cards = adapter.written_skill_cards()
        assert len(cards) == 2 * HIDDEN.n_families
        for row in rows:
            task = adapter.task_from_row(row)
            truth = task_for(HIDDEN, task.id)
            stated = truth.answer if card == "correct" else truth.answer % 4 + 1
            text = cards[adapter.written_skill_key(task)]
            assert f"the {truth.family_name} family is {stated}: reply <action>{stated}<" in text
    assert ProbeAdapter(cfg=ProbeConfig()).written_skill_cards() == {}  # stated: none


def test_an_episode_measure_is_the_answer_sent():
    adapter = ProbeAdapter()
    turn = Turn(observation="Answers: 1, 2.", model_text="<action>2</action>", action="2",
                action_status="ok")
    assert adapter.episode_measures([turn]) == {"chosen": "2"}
    assert adapter.episode_measures([]) == {}


def test_prepared_splits_are_rows_every_reader_takes(tmp_path):
    cfg = _config(tmp_path, "hidden", n_families=2, train_tasks=6, valid_tasks=4)
    prepare_data(cfg)
    from evolving_rl.retrieval.prepared import PreparedData

    data = PreparedData.read(cfg)
    assert [len(data.split(s)) for s in ("train", "valid")] == [6, 4]
    assert {row.task_type for row in data.split("valid")} == {"hidden"}
    before = (tmp_path / "prepared" / "train.jsonl").stat().st_mtime_ns
    prepare_data(cfg)  # unchanged: not rewritten
    assert (tmp_path / "prepared" / "train.jsonl").stat().st_mtime_ns == before
    assert domain_for(cfg).name == "probe"


def _launch(action: str, cfg: Config, folder: Path) -> None:
    path = folder / "probe.json"
    path.write_text(json.dumps({"environment": "probe", "probe": {
        k: getattr(cfg.probe, k) for k in ("kind", "port", "log_dir", "capacity")}}))
    subprocess.run([sys.executable, "-m", "env.probe.launch", action, "--config", str(path)],
                   check=True, cwd=ROOT, timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    cfg = _config(folder)
    _launch("start", cfg, folder)
    try:
        yield cfg, f"http://127.0.0.1:{cfg.probe.port}"
    finally:
        _launch("stop", cfg, folder)
    assert read_pid(pid_file(cfg.probe)) is None


def _post(url: str, route: str, body: object) -> requests.Response:
    return requests.post(f"{url}{route}", json=body, timeout=10)


def test_an_episode_is_one_answer_and_its_feedback(server):
    cfg, url = server
    task = make_task(cfg.probe, "valid", 3)
    view = _post(url, "/reset", {"task": task.id}).json()
    assert view["observation"] == task.observation() and view["answers"] == ["1", "2", "3", "4"]
    assert not view["done"] and "answer" not in view
    wrong = str(task.answer % 4 + 1)
    done = _post(url, "/step", {"episode_id": view["episode_id"], "action": wrong}).json()
    assert done["done"] and not done["won"] and done["answer"] == task.answer and done["valid"]
    assert f"winning answer is {task.answer}" in done["observation"]
    again = _post(url, "/step", {"episode_id": view["episode_id"], "action": "1"})
    assert again.status_code == 409 and again.json()["error"] == "episode_done"
    assert _post(url, "/close", {"episode_id": view["episode_id"]}).json() == {
        "closed": view["episode_id"]}
    won = _post(url, "/reset", {"task": task.id}).json()
    right = _post(url, "/step", {"episode_id": won["episode_id"], "action": f" {task.answer}\n"})
    assert right.json()["won"]
    _post(url, "/close", {"episode_id": won["episode_id"]})


@pytest.mark.parametrize(("route", "body", "status", "code", "field"), [
    ("/reset", [1], 400, "malformed_json", "body"),
    ("/reset", {}, 400, "bad_request", "task"),
    ("/reset", {"task": 5}, 400, "bad_request", "task"),
    ("/reset", {"task": "stated-train-9999"}, 404, "unknown_task", "task"),
    ("/step", {"episode_id": "nope", "action": "1"}, 404, "unknown_episode", "episode_id"),
    ("/step", {"episode_id": "nope", "action": ["1"]}, 400, "bad_request", "action"),
    ("/close", {"episode_id": 3}, 400, "bad_request", "episode_id"),
])
def test_client_mistakes_get_a_4xx_naming_the_field(server, route, body, status, code, field):
    _, url = server
    resp = _post(url, route, body)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"] == code and resp.json()["field"] == field


def test_capacity_answers_503_with_retry_after(server):
    cfg, url = server
    ids = []
    try:
        for _ in range(cfg.probe.capacity):
            ids.append(_post(url, "/reset", {"task": "stated-train-0000"}).json()["episode_id"])
        full = _post(url, "/reset", {"task": "stated-train-0000"})
        assert full.status_code == 503 and full.headers["Retry-After"] == "1"
    finally:
        for episode_id in ids:
            _post(url, "/close", {"episode_id": episode_id})


def test_the_adapter_plays_the_server(server):
    cfg, url = server
    adapter = ProbeAdapter(lenient=False)
    task = adapter.task_from_row(split_rows(cfg.probe, "train")[5])
    answer = make_task(cfg.probe, "train", 5).answer

    async def play() -> tuple:
        async with aiohttp.ClientSession() as session:
            env = EnvClient(session, url, cfg.clients)
            episode_id, first = await adapter.reset(env, task)
            choice = adapter.parse_action(f"<action>{answer}</action>", first)
            last = await adapter.step(env, episode_id, choice.command)
            await env.close_episode(episode_id)
            return first, choice, last

    first, choice, last = asyncio.run(play())
    assert first.actions == ("1", "2", "3", "4") and choice.valid
    assert last.done and last.score == 1.0 and last.info["answer"] == answer
    prompt = adapter.solver_messages(task, first, "States: 3")[1]["content"]
    assert prompt.endswith(f"winning answer is {answer}") and "States: 3" in prompt


def test_replies_are_read_strictly_or_leniently():
    answers = ("1", "2", "3", "4")
    assert choose_answer("<action>3</action>", answers, False) == ("3", ActionStatus.OK)
    assert choose_answer("I pick 2", answers, False) == (None, ActionStatus.NO_ACTION_TAG)
    assert choose_answer("I pick 2", answers, True) == ("2", ActionStatus.OK)
    assert choose_answer("<action>7</action>", answers, False) == (None,
                                                                   ActionStatus.NOT_ADMISSIBLE)
    assert choose_answer("x9", answers, True) == (None, ActionStatus.NO_ACTION_TAG)


def test_dense_retrieval_returns_tasks_of_the_same_family(tmp_path):
    """The retrieval cache of the hidden kind (MiniLM, as the local job builds it): every train
    task's top-3 other train tasks are of its own family."""
    from evolving_rl.local.servers import build_retrieval_cache
    from evolving_rl.retrieval.cache import load_cache
    from evolving_rl.retrieval.index import SearchFilter, SearchIndex

    cfg = _config(tmp_path, "hidden", n_families=8, train_tasks=32, valid_tasks=16)
    prepare_data(cfg)
    build_retrieval_cache(cfg)
    index = SearchIndex(load_cache(cfg.retrieval.cache_path))
    rows = [row for row in index.rows if "train" in row.splits]
    queries = index.vectors[[index.rows.index(row) for row in rows]]
    hits = index.search(queries, 3, [SearchFilter(split="train", exclude_ids=frozenset({r.id}))
                                     for r in rows])
    family = {row.id: row.id.split("-")[2] for row in rows}
    assert all(family[h.id] == family[row.id] for row, row_hits in zip(rows, hits, strict=True)
               for h in row_hits)
