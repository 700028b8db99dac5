"""The synthetic Mind2Web generator writes the official format, layout and encryption."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
import zipfile
from collections import Counter

import pytest

from env.mind2web.dom import TESTID_ATTR
from env.mind2web.generate import GenerateSpec, generate, main

TASK_KEYS = {"annotation_id", "website", "domain", "subdomain", "confirmed_task",
             "action_reprs", "actions"}
ACTION_KEYS = {"action_uid", "raw_html", "cleaned_html", "operation", "pos_candidates",
               "neg_candidates"}
CANDIDATE_KEYS = {"attributes", "backend_node_id", "is_original_target", "is_top_level_target",
                  "tag"}


def load_split_tasks(generated, password: str) -> dict[str, list[dict]]:
    """Every generated task per split (train from its files, tests from the zip)."""
    tasks: dict[str, list[dict]] = {}
    for path in generated.files:
        if path.suffix == ".json":
            tasks.setdefault("train", []).extend(json.loads(path.read_text()))
            continue
        with zipfile.ZipFile(path) as archive:
            for name in sorted(archive.namelist()):
                split = name.split("/")[0]
                tasks.setdefault(split, []).extend(
                    json.loads(archive.read(name, pwd=password.encode())))
    return tasks


@pytest.fixture(scope="module")
def tasks(mind2web_generated, mind2web_spec) -> dict[str, list[dict]]:
    return load_split_tasks(mind2web_generated, mind2web_spec.password)


@pytest.fixture(scope="module")
def actions(tasks) -> list[dict]:
    return [a for split in tasks.values() for t in split for a in t["actions"]]


def test_layout_and_counts(mind2web_generated, mind2web_spec, tasks):
    data = mind2web_generated.root / "data"
    assert sorted(p.name for p in (data / "train").iterdir()) == \
        [f"train_{i}.json" for i in range(len(list((data / "train").iterdir())))]
    assert (mind2web_generated.root / "test.zip").is_file()  # where the dataset keeps it
    assert not (data / "test.zip").exists()
    assert {s: len(t) for s, t in tasks.items()} == mind2web_generated.counts
    assert sum(mind2web_generated.counts.values()) == mind2web_spec.tasks


def test_tasks_follow_the_official_schema(tasks):
    for task in (t for split in tasks.values() for t in split):
        assert set(task) == TASK_KEYS
        assert all(isinstance(task[k], str) and task[k] for k in TASK_KEYS - {"action_reprs",
                                                                              "actions"})
        assert len(task["action_reprs"]) == len(task["actions"]) >= 2
        for action in task["actions"]:
            assert set(action) == ACTION_KEYS
            assert set(action["operation"]) == {"op", "original_op", "value"}
            assert action["operation"]["op"] in {"CLICK", "TYPE", "SELECT"}
            for cand in action["pos_candidates"] + action["neg_candidates"]:
                assert set(cand) == CANDIDATE_KEYS
                assert isinstance(cand["attributes"], str) and isinstance(cand["tag"], str)
                assert json.loads(cand["attributes"])["backend_node_id"] == cand["backend_node_id"]
    ids = [t["annotation_id"] for split in tasks.values() for t in split]
    assert len(set(ids)) == len(ids)


def test_operations_and_original_ops_vary(actions):
    ops = Counter((a["operation"]["op"], a["operation"]["original_op"]) for a in actions)
    assert {op for op, _ in ops} == {"CLICK", "TYPE", "SELECT"}
    assert ("CLICK", "ENTER") in ops and ("CLICK", "HOVER") in ops
    for action in actions:
        op = action["operation"]
        assert (op["value"] != "") == (op["op"] in ("TYPE", "SELECT"))


def test_candidates_exist_in_cleaned_html_with_their_tag(actions):
    for action in actions:
        tree = ET.fromstring(action["cleaned_html"])
        by_id = {el.get("backend_node_id"): el.tag for el in tree.iter()}
        assert all(by_id.values()) and None not in by_id
        for cand in action["pos_candidates"] + action["neg_candidates"]:
            assert by_id[cand["backend_node_id"]] == cand["tag"]
        neg_tags = {c["tag"] for c in action["neg_candidates"]}
        assert {"html", "body"} <= neg_tags


def test_cleaned_html_is_a_dom_snapshot(actions):
    for action in actions:
        tree = ET.fromstring(action["cleaned_html"])
        for el in tree.iter():
            dropped = {"class", "onclick", "is_clickable", "aria-label", TESTID_ATTR}
            assert not dropped & set(el.attrib)
            assert el.get("role") != "link"
            if el.tag != "text":
                assert not (el.text or "").strip(), "text sits in <text> nodes"
        assert action["cleaned_html"].isascii()


def test_raw_html_marks_the_acted_element_with_the_action_uid(actions):
    for action in actions:
        uid = action["action_uid"]
        assert action["raw_html"].count(f'{TESTID_ATTR}="{uid}"') == 1
        assert uid not in action["cleaned_html"]
    assert all('role="link"' in a["raw_html"] for a in actions if "<table" in a["raw_html"])


def test_hard_cases_are_present(actions):
    no_positive = sum(not a["pos_candidates"] for a in actions)
    assert 0 < no_positive < len(actions) * 0.2

    def depth(el, d=0):
        return max([d] + [depth(c, d + 1) for c in el])
    assert any(depth(ET.fromstring(a["cleaned_html"])) > 20 for a in actions)
    svg_positive = [a for a in actions if [c["tag"] for c in a["pos_candidates"]] == ["svg"]]
    assert svg_positive and any("button" in {c["tag"] for c in a["neg_candidates"]}
                                for a in svg_positive)


def test_negatives_are_most_other_elements(actions):
    elements = candidates = 0
    for action in actions:
        tree = ET.fromstring(action["cleaned_html"])
        elements += sum(el.tag != "text" for el in tree.iter()) - len(action["pos_candidates"])
        candidates += len(action["neg_candidates"])
    assert 0.55 < candidates / elements < 0.75


def test_test_splits_hold_out_websites_and_domains(tasks):
    train_sites = {t["website"] for t in tasks["train"]}
    train_domains = {t["domain"] for t in tasks["train"]}
    assert {t["website"] for t in tasks["test_task"]} <= train_sites
    assert not {t["website"] for t in tasks["test_website"]} & train_sites
    assert {t["domain"] for t in tasks["test_website"]} <= train_domains
    assert not {t["domain"] for t in tasks["test_domain"]} & train_domains


def test_test_zip_needs_the_password(mind2web_generated, mind2web_spec):
    zip_path = mind2web_generated.root / "test.zip"
    with zipfile.ZipFile(zip_path) as archive:
        names = archive.namelist()
        assert {n.split("/")[0] for n in names} == {"test_task", "test_website", "test_domain"}
        assert all(info.flag_bits & 1 for info in archive.infolist())
        with pytest.raises(RuntimeError, match="password required"):
            archive.read(names[0])
        with pytest.raises(RuntimeError, match="Bad password"):
            archive.read(names[0], pwd=b"not-the-password")
        opened = archive.read(names[0], pwd=mind2web_spec.password.encode())
        assert isinstance(json.loads(opened), list)


def test_deterministic_by_seed(tmp_path, mind2web_generated, mind2web_spec):
    again = generate(tmp_path / "again", mind2web_spec)
    for mine, theirs in zip(mind2web_generated.files, again.files, strict=True):
        assert mine.read_bytes() == theirs.read_bytes()
    other = generate(tmp_path / "other", dataclasses.replace(mind2web_spec, seed=8))
    assert other.files[0].read_bytes() != again.files[0].read_bytes()


def test_same_spec_is_kept_and_real_data_is_never_replaced(tmp_path):
    spec = GenerateSpec(tasks=4, distractors=2)
    first = generate(tmp_path / "gen", spec)
    stamp = first.files[0].stat().st_mtime_ns
    assert generate(tmp_path / "gen", spec).files == first.files
    assert first.files[0].stat().st_mtime_ns == stamp
    official = tmp_path / "official" / "data" / "train"
    official.mkdir(parents=True)
    (official / "train_0.json").write_text("[]")
    with pytest.raises(FileExistsError, match="not written by this generator"):
        generate(tmp_path / "official", spec)
    assert (official / "train_0.json").read_text() == "[]"
    (tmp_path / "zip_only").mkdir()
    (tmp_path / "zip_only" / "test.zip").write_bytes(b"theirs")
    with pytest.raises(FileExistsError, match="not written by this generator"):
        generate(tmp_path / "zip_only", spec)
    assert (tmp_path / "zip_only" / "test.zip").read_bytes() == b"theirs"
    moved = generate(tmp_path / "gen", dataclasses.replace(spec, zip_at="data"))
    assert moved.files[-1] == tmp_path / "gen" / "data" / "test.zip"
    assert not (tmp_path / "gen" / "test.zip").exists()


def test_cli_size_knob_and_split_choice(tmp_path):
    main(["--out", str(tmp_path / "small"), "--tasks", "3", "--splits", "train",
          "--distractors", "0"])
    main(["--out", str(tmp_path / "big"), "--tasks", "3", "--splits", "train",
          "--distractors", "60"])
    small = sum(p.stat().st_size for p in (tmp_path / "small" / "data" / "train").iterdir())
    big = sum(p.stat().st_size for p in (tmp_path / "big" / "data" / "train").iterdir())
    assert not list((tmp_path / "small").rglob("test.zip"))
    assert big > 2 * small
