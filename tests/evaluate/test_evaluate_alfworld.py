"""Checkpoint evaluation on ALFWorld: valid_seen and valid_unseen against the real ALFWorld and
retrieval servers (already running: the runner's `start_servers=False` path), with a scripted
policy that plays a game's planner walkthrough only when the good skill's card is in its prompt
and the game's task type is one of the training types (those of train_seen), and `look`
otherwise. Hand-computed: with the skill, the four training types succeed and the two held-out
types fail; without it nothing succeeds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from evolving_rl.evaluate.report import write_report
from evolving_rl.evaluate.runner import EvalRequest, run_evaluation
from tests.fakes.checkpoint import checkpoint_spec
from tests.fakes.scripted import SKILLS, ScriptedPolicy, skill_responder
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.fakes.web import GOOD_CARD

TOK = ByteChatTokenizer()
SPLITS = ("valid_seen", "valid_unseen")
_TASK = re.compile(r"Your task is to: (.*)")


def _walkthroughs(cfg, split: str) -> dict[str, tuple[str, list[str]]]:
    """Question -> (task type, walkthrough) of a prepared split's games."""
    root = Path(cfg.alfworld.data_root)
    book = {}
    for line in (Path(cfg.alfworld.prepared_dir) / f"{split}.jsonl").read_text().splitlines():
        row = json.loads(line)
        game = json.loads((root / row["metadata"]["game"]).read_text())
        book[row["question"]] = (row["metadata"]["task_type"], game["walkthrough"])
    return book


def _solver(book: dict[str, tuple[str, list[str]]], train_types: set[str]):
    def respond(prompt: str) -> str:
        task_type, walkthrough = book.get(_TASK.search(prompt).group(1).strip(), ("", []))
        step = prompt.count("\nassistant\n") - 1  # replies so far (the last header is open)
        if GOOD_CARD in prompt and task_type in train_types and step < len(walkthrough):
            return f"<reasoning>plan</reasoning><action>{walkthrough[step]}</action>"
        return "<reasoning>wait</reasoning><action>look</action>"
    return respond


def test_seen_and_unseen_with_training_and_held_out_types(real_servers, contract_config,
                                                          tmp_path):
    cfg = dataclasses.replace(contract_config, pipeline=dataclasses.replace(
        contract_config.pipeline, max_steps=10))
    book = {q: v for split in SPLITS for q, v in _walkthroughs(cfg, split).items()}
    train_types = {json.loads(line)["metadata"]["task_type"] for line in (
        Path(cfg.alfworld.prepared_dir) / "train_seen.jsonl").read_text().splitlines()}
    policy = ScriptedPolicy(TOK, skill_responder([json.dumps(SKILLS["reference"].good)],
                                                 _solver(book, train_types)))

    @contextlib.asynccontextmanager
    async def opener() -> AsyncIterator:
        yield policy, TOK

    request = EvalRequest(out_dir=tmp_path, splits=SPLITS, repeats=1, train_split="train_seen",
                          start_servers=False)
    outcome = run_evaluation(cfg, checkpoint_spec(tmp_path / "step_0001"), request, opener)
    assert outcome.train_types == train_types
    for split in SPLITS:
        metrics = outcome.results[split]["reference"]
        types = [v[0] for v in _walkthroughs(cfg, split).values()]
        seen = sum(t in train_types for t in types)
        assert metrics["eval/skill_obtained_rate"] == 1.0 and metrics["eval/infra_failures"] == 0
        assert metrics["eval/all/with_skill_success_mean"] == pytest.approx(seen / len(types))
        assert metrics["eval/all/without_skill_success_mean"] == 0.0
        assert metrics["eval/group/training_types/with_skill_success_mean"] == 1.0
        assert metrics["eval/group/held_out_types/with_skill_success_mean"] == 0.0
        for task_type in set(types):
            expected = float(task_type in train_types)
            key = f"eval/task_type/{task_type}/with_skill_success_mean"
            assert metrics[key] == expected
    paths = write_report(tmp_path, {"environment": "alfworld", "policy": "scripted",
                                    "protocols": ["reference"], "repeats": 1,
                                    "train_types": sorted(train_types)}, outcome.results)
    report = (tmp_path / "report.md").read_text()
    assert "| GRPO (paper) | held_out_types | 44.6 |" in report  # valid_unseen vs published
    assert "| reference | training_types | 100.0 ± 0.0 | 0.0 ± 0.0 |" in report
    assert {p.name for p in paths} == {"report.md", "report.json", "valid_seen.png",
                                       "valid_unseen.png"}
