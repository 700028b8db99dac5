"""`python -m evolving_rl.skills` on a small library of real records (both skill formats, three
task types, audit and parse failures): filters, order, text and MiniLM search, cards, exports
that evaluation loads, and exit 2 with a message for every mistake."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evolving_rl.config import parse_config
from evolving_rl.pipeline.evaluation import run_eval
from evolving_rl.pipeline.skill_library import SkillLibrary, SkillRecord
from evolving_rl.retrieval.encoder import load_encoder
from evolving_rl.skills.__main__ import main
from evolving_rl.skills.search import embedding_search
from evolving_rl.skills.select import skill_id
from tests.fakes.context import fake_context, small_config, toy_rows
from tests.fakes.scripted import COMPACT_SKILL, SKILLS, ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer

ROOT = Path(__file__).resolve().parents[2]
MUG = "put a clean mug on the desk."
HEAT = {**COMPACT_SKILL, "name": "Heat food in the microwave",
        "applicable_when": "A task asks to warm or heat food before placing it."}
COOL = {**COMPACT_SKILL, "name": "Chill a drink in the fridge",
        "applicable_when": "A task asks to cool a bottle or drink."}


def _record(rollout: str, source: str, index: int, task_type: str, question: str,
            skill: dict[str, Any] | None, reward: float | None, **fields: Any) -> SkillRecord:
    parse_ok = skill is not None
    row = {"rollout": rollout, "source_id": source, "source_question": question,
           "source_task_type": task_type, "source_success": False, "skill_index": index,
           "skill_format": "compact", "status": "completed", "parse_ok": parse_ok,
           "parse_reason": "ok" if parse_ok else "no_json_object", "audit_ok": parse_ok,
           "audit_rule": None, "audit_detail": "", "skill": skill,
           "raw_text": json.dumps(skill) if skill else "no json at all",
           "downstream_ids": ["t2", "t3"], "downstream_scores": [reward, 0.0],
           "reward": reward, "reward_status": "ok" if parse_ok else "unparseable", **fields}
    return SkillRecord(**row)


REF = {"skill_format": "reference"}
RECORDS = [
    _record("1", "t0", 0, "pick", MUG, SKILLS["reference"].good, 1.0, **REF),
    _record("1", "t0", 1, "pick", MUG, SKILLS["reference"].bad, 0.0, **REF),
    _record("1", "t0", 2, "pick", MUG, SKILLS["reference"].chinese, 0.0, audit_ok=False,
            audit_rule="non_english", audit_detail="non-ASCII letter", reward_status="audit_failed",
            **REF),
    _record("1", "t1", 0, "heat", "heat an apple in the microwave.", HEAT, 0.5),
    _record("2", "t1", 1, "heat", "heat an apple in the microwave.", None, None),
    _record("2", "t4", 0, "cool", "cool a bottle with the fridge.", COOL, 0.75),
    _record("2", "t0", 1, "pick", MUG, SKILLS["reference"].valid, 0.5, **REF),
]
IDS = [skill_id(record) for record in RECORDS]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    SkillLibrary.in_run_dir(tmp_path / "run").append(RECORDS)
    return tmp_path / "run"


def cli(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def listed(capsys, run_dir: Path, *argv: str) -> list[str]:
    rows = json.loads(cli(capsys, "list", "--run-dir", str(run_dir), "--json", *argv))
    return [row["id"] for row in rows]


def test_list_filters_and_sorts(capsys, run_dir):
    assert listed(capsys, run_dir, "--sort", "rollout") == IDS
    assert listed(capsys, run_dir, "--task-type", "heat", "--sort", "rollout") == IDS[3:5]
    # Reward order: highest first, ties in library order, unrewarded last.
    assert listed(capsys, run_dir) == [IDS[i] for i in (0, 5, 3, 6, 1, 2, 4)]
    assert listed(capsys, run_dir, "--min-reward", "0.5") == [IDS[i] for i in (0, 5, 3, 6)]
    assert listed(capsys, run_dir, "--audit", "failed") == [IDS[2]]
    assert listed(capsys, run_dir, "--audit", "ok", "--sort", "rollout") == [
        IDS[i] for i in (0, 1, 3, 5, 6)]
    assert listed(capsys, run_dir, "--usable", "--limit", "2") == [IDS[0], IDS[5]]


def test_list_prints_a_table_from_the_command_line(run_dir):
    done = subprocess.run([sys.executable, "-m", "evolving_rl.skills", "list", "--library",
                           str(run_dir / "skill_library.jsonl"), "--task-type", "pick"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["row", "id", "task_type", "reward", "audit", "usable", "name"]
    assert lines[1].split()[:6] == ["1", "1:t0:0", "pick", "1.000", "ok", "yes"]
    assert [line.split()[0] for line in lines[1:5]] == ["1", "7", "2", "3"]  # library rows
    assert "failed:non_english" in done.stdout and lines[-1] == "(4 skills)"


def test_text_search_ranks_by_matched_words(capsys, run_dir):
    """A query word matches the words it starts; the score counts distinct query words."""
    out = cli(capsys, "search", "Microwav!", "--run-dir", str(run_dir), "--json")
    assert [row["id"] for row in json.loads(out)] == IDS[3:5]
    out = cli(capsys, "search", "mug desk microwave", "--run-dir", str(run_dir), "--top-k", "3",
              "--json")
    assert [(row["id"], row["score"]) for row in json.loads(out)] == [
        (IDS[0], 2.0), (IDS[1], 2.0), (IDS[2], 2.0)]
    out = cli(capsys, "search", "fridge", "--run-dir", str(run_dir), "--usable", "--json")
    assert [row["id"] for row in json.loads(out)] == [IDS[5]]


@pytest.fixture(scope="module")
def encoder():
    return load_encoder(parse_config({}).retrieval)


def test_embedding_search_puts_the_closest_skill_first(encoder):
    warm = embedding_search(RECORDS, "warm up some food", 2, encoder)
    chill = embedding_search(RECORDS, "make a drink cold", 7, encoder)
    assert skill_id(warm[0].record) == IDS[3] and skill_id(chill[0].record) == IDS[5]
    assert len(warm) == 2 and len(chill) == len(RECORDS)
    assert [s.score for s in chill] == sorted((s.score for s in chill), reverse=True)


def test_embedding_search_from_the_command_line(capsys, run_dir, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("retrieval:\n  model: minilm\n  torch_threads: 1\n")
    out = cli(capsys, "search", "heating a meal", "--mode", "embedding", "--run-dir",
              str(run_dir), "--config", str(config), "--top-k", "1")
    assert out.splitlines()[1].split()[1:3] == ["4", IDS[3]] and "(1 skills)" in out


def test_show_prints_the_card_and_scores(capsys, run_dir):
    out = cli(capsys, "show", "1:t0:0", "--run-dir", str(run_dir))
    assert "# Skill: Take the mug" in out and "reward:      1.000 (ok)" in out
    assert "downstream:  t2=1.000, t3=0.000" in out
    assert "### Skill: Heat food in the microwave" in cli(capsys, "show", IDS[3], "--run-dir",
                                                          str(run_dir))
    failed = cli(capsys, "show", IDS[2], "--run-dir", str(run_dir))
    assert "audit:       failed:non_english non-ASCII letter" in failed
    assert "no json at all" in cli(capsys, "show", IDS[4], "--run-dir", str(run_dir))


def test_show_takes_a_row_number_or_the_start_of_one_id(capsys, run_dir):
    rows = json.loads(cli(capsys, "list", "--run-dir", str(run_dir), "--json", "--usable"))
    assert [row["row"] for row in rows] == [1, 6, 4, 7, 2]  # library rows, whatever the order
    card = cli(capsys, "show", IDS[5], "--run-dir", str(run_dir))
    assert cli(capsys, "show", "6", "--run-dir", str(run_dir)) == card
    assert cli(capsys, "show", "2:t4", "--run-dir", str(run_dir)) == card
    # an exact id wins over the longer ids it starts
    long = _record("1", "t0:0x", 0, "pick", MUG, HEAT, 0.5)
    SkillLibrary.in_run_dir(run_dir).append([long])
    assert cli(capsys, "show", "1:t0:0", "--run-dir", str(run_dir)) == cli(
        capsys, "show", "1", "--run-dir", str(run_dir))


def test_export_keeps_the_best_usable_skill_per_source(capsys, run_dir, tmp_path):
    out = tmp_path / "top.jsonl"
    cli(capsys, "export", "--run-dir", str(run_dir), "--out", str(out), "--top", "2")
    assert SkillLibrary(out).load() == [RECORDS[0], RECORDS[5]]
    assert SkillLibrary(out).best_by_source() == {"t0": RECORDS[0], "t4": RECORDS[5]}
    cli(capsys, "export", "--run-dir", str(run_dir), "--out", str(out), "--top", "9",
        "--task-type", "heat", "--force")
    assert SkillLibrary(out).load() == [RECORDS[3]]


@pytest.mark.parametrize(("task_type", "obtained"), [("pick", 1.0), ("cool", 0.0)])
def test_an_export_is_a_library_evaluation_uses(capsys, run_dir, tmp_path, task_type, obtained):
    """The fake retrieval returns t0 for the test tasks: only an export holding t0 helps."""
    out = tmp_path / "export.jsonl"
    cli(capsys, "export", "--run-dir", str(run_dir), "--out", str(out), "--top", "1",
        "--task-type", task_type)
    ctx = fake_context(tmp_path, small_config(skill_format="compact"),
                       policy=ScriptedPolicy(ByteChatTokenizer(), skill_responder(["nothing"])))
    rows = [row for row in toy_rows(6) if row["id"] in ("t2", "t3")]
    metrics = asyncio.run(run_eval(ctx, rows, library=SkillLibrary(out)))
    assert metrics["eval/skill_obtained_rate"] == obtained
    assert metrics["eval/all/with_skill_success_mean"] == obtained


@pytest.mark.parametrize(("argv", "message"), [
    (["list", "--run-dir", "{tmp}/nowhere"], "no skill library at"),
    (["show", "9:t9:9", "--run-dir", "{run}"], "no skill with id '9:t9:9'"),
    (["show", "1:t0", "--run-dir", "{run}"],
     "'1:t0' starts 3 ids; give more of one:\n  1:t0:0\n  1:t0:1\n  1:t0:2\n"),
    (["show", "8", "--run-dir", "{run}"], "no row 8: the library has rows 1 to 7"),
    (["show", "0", "--run-dir", "{run}"], "no row 0"),
    (["list", "--run-dir", "{run}", "--task-type", "cook"], "--task-type 'cook': no record"),
    (["list", "--run-dir", "{run}", "--audit", "maybe"], "invalid choice: 'maybe'"),
    (["list", "--run-dir", "{run}", "--limit", "0"], "must be at least 1"),
    (["search", "!!", "--run-dir", "{run}"], "holds no words"),
    (["export", "--run-dir", "{run}", "--out", "{run}/skill_library.jsonl", "--top", "1"],
     "exists (pass --force"),
    (["list", "--library", "{tmp}/bad.jsonl"], "bad.jsonl:1: field 'source_id' is missing"),
])
def test_mistakes_exit_2_with_a_message(run_dir, tmp_path, argv, message):
    (tmp_path / "bad.jsonl").write_text('{"rollout": "1"}\n')
    args = [a.format(tmp=tmp_path, run=run_dir) for a in argv]
    done = subprocess.run([sys.executable, "-m", "evolving_rl.skills", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""



def test_an_export_with_no_usable_skill_writes_nothing_and_says_why(tmp_path, capsys):
    unusable = [RECORDS[2], RECORDS[4]]  # an audit failure and an unparsed skill
    SkillLibrary.in_run_dir(tmp_path / "run").append(unusable)
    out = tmp_path / "run" / "skills.jsonl"
    with pytest.raises(SystemExit) as exited:
        main(["export", "--run-dir", str(tmp_path / "run"), "--out", str(out), "--top", "5"])
    assert exited.value.code == 2 and not out.exists()
    assert not out.with_name("skills.jsonl.partial").exists()
    error = capsys.readouterr().err
    assert f"nothing exported, {out} not written: none of the 2 skills is usable" in error


def _library_with(tmp_path: Path, line: str) -> Path:
    """The fixture's records with `line` as the third line."""
    path = tmp_path / "hostile.jsonl"
    SkillLibrary(path).append(RECORDS)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join([*lines[:2], line + "\n", *lines[2:]]), encoding="utf-8")
    return path


def _row(**fields: Any) -> str:
    return json.dumps({**dataclasses.asdict(RECORDS[0]), **fields})


@pytest.mark.parametrize(("line", "message"), [
    (_row(parse_ok="false"), "field 'parse_ok' must be true or false, got \"false\""),
    (_row(reward=float("nan")), "field 'reward' must be a finite number or null, got NaN"),
    (_row(reward=True), "field 'reward' must be a finite number or null, got true"),
    (_row(reward="0.9"), "field 'reward' must be a finite number or null, got \"0.9\""),
    (_row(skill="not a dict"), "field 'skill' must be a JSON object or null"),
    (_row(downstream_scores=[1, "x"]), "field 'downstream_scores' must be a list of finite"),
    (_row(extra=1), "unknown field 'extra'"),
    ("[1, 2]", "not a JSON object"),
    ('{"rollout": ', "not JSON"),
])
def test_a_record_of_the_wrong_types_exits_2_naming_file_line_and_field(
        tmp_path, capsys, line, message):
    path = _library_with(tmp_path, line)
    for command in (["list"], ["export", "--out", str(tmp_path / "out.jsonl"), "--top", "3"]):
        with pytest.raises(SystemExit) as exited:
            main([*command, "--library", str(path)])
        assert exited.value.code == 2
        assert f"error: {path}:3: {message}" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_torn_last_line_is_dropped_with_a_warning(tmp_path, capsys, caplog):
    path = tmp_path / "torn.jsonl"
    SkillLibrary(path).append(RECORDS)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(_row(rollout="3")[:40])  # killed mid-write
    with caplog.at_level("WARNING"):
        rows = json.loads(cli(capsys, "list", "--library", str(path), "--json"))
    assert len(rows) == len(RECORDS)
    assert f"{path}:{len(RECORDS) + 1}: torn last line dropped" in caplog.text


def test_a_nan_reward_is_refused_at_write_and_nothing_is_written(tmp_path):
    path = tmp_path / "lib.jsonl"
    bad = dataclasses.replace(RECORDS[0], reward=float("nan"))
    with pytest.raises(ValueError, match="field 'reward' must be a finite number or null"):
        SkillLibrary(path).append([RECORDS[1], bad])
    assert not path.exists()
