"""The skill-use scaling table (`evaluate.scaling`): arms per protocol and group, Fisher p
against no_skill, infra failures apart, the why-columns from the cards and the probe."""

from __future__ import annotations

import json
from pathlib import Path

from evolving_rl.evaluate.scaling import ModelRun, protocol_cells, render_scaling, scaling_rows
from evolving_rl.local.model import resolve_model_path

ROOT = Path(__file__).resolve().parents[2]


def _arm(bucket: str, arm: str, wins: int, scored: int) -> dict[str, float]:
    return {f"eval/{bucket}/{arm}_wins": wins, f"eval/{bucket}/{arm}_scored": scored}


def _results() -> dict:
    held = "group/held_out_types"
    return {
        "no_skill": {**_arm("all", "without_skill", 4, 144), **_arm(held, "without_skill", 4, 48),
                     "eval/infra_failures": 0},
        "written_skill": {**_arm("all", "with_skill", 30, 144), **_arm(held, "with_skill", 20, 48),
                          **_arm("all", "without_skill", 5, 144), "eval/infra_failures": 2},
        "reference": {**_arm("all", "with_skill", 5, 140), "eval/infra_failures": 4}}


def test_each_with_skill_arm_is_tested_against_the_no_skill_protocol():
    cells = protocol_cells(_results())
    assert cells["no_skill"]["all"] == {"wins": 4, "episodes": 144, "p": None}
    written = cells["written_skill"]
    assert (written["all"]["wins"], written["all"]["episodes"]) == (30, 144)  # the with-skill arm
    assert written["all"]["p"] < 1e-4 and written["held-out types"]["p"] < 1e-3  # 20/48 vs 4/48
    assert cells["reference"]["all"]["p"] > 0.5  # 5/140 vs 4/144
    assert "held-out types" not in cells["reference"]  # not recorded: left out, not zero
    assert cells["reference"]["infra_failures"] == 4


def test_the_table_renders_every_group_and_the_why_columns(tmp_path):
    run = tmp_path / "eval"
    run.mkdir()
    (run / "report.json").write_text(json.dumps({"meta": {}, "results": {"valid_unseen":
                                                                          _results()}}))
    (run / "probe.json").write_text(json.dumps({"none": {"top1": 0.58, "chance_top1": 0.19},
                                                "system": {"top1": 0.49}}))
    smollm2 = resolve_model_path("smollm2", ROOT / "models")  # converted once, from PyPI
    rows = scaling_rows([ModelRun("tiny", run, smollm2)], "valid_unseen", 4096)
    short, long = rows[0]["card_tokens"]
    assert 150 < short <= long < 300  # the cards are ~200 SmolLM2 tokens
    text = render_scaling(rows)
    assert "| tiny | 4/144 (2.8) | 30/144 (20.8), p = " in text
    assert "### held-out types" in text and "| 6 |" in text  # infra failures summed
    assert "probe top-1 58% -> 49% with the card (chance 19%)" in text
