"""Gold play of generated Mind2Web tasks, for tests that script a web solver.

Owns `GoldPlay` (one generated step: the page snapshot the env server shows, a right and a wrong
action, judged as `env.mind2web.validate` does under the reference's fallback — a step without a
positive candidate, `positive` False, has no right element under the standard rule), `gold_book`
(prepared question -> the steps of its task, for the train split and the test splits extracted
from the zip) and `WebSolver` (right with the good skill's card in the prompt or before step
`WRONG_AT`, wrong after; prompts whose page is not the generated one are recorded in `misses`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from env.mind2web.snapshot import build_snapshot
from env.mind2web.validate import GoldStep, expected_refs
from evolving_rl.domains.mind2web_metrics import REFERENCE_FALLBACK
from tests.fakes.scripted import SKILLS

GOOD_CARD = f"Skill: {SKILLS['compact'].good['name']}"  # in the card of either format
WRONG_AT = 1  # without the good skill, the solver is right on the steps before this one
_QUESTION = re.compile(r"Your task is to: (.*)")
_STEP = re.compile(r"\[Step (\d+)\]\nCurrent task:\n.*?\n\nCurrent page snapshot:\n(.*?)"
                   r"\n\nPrevious actions:", re.S)


@dataclass(frozen=True)
class GoldPlay:
    """One generated step: the page snapshot the server shows, a right and a wrong action."""

    snapshot: str
    right: dict[str, str]
    wrong: dict[str, str]
    positive: bool  # the step has a positive candidate


def _play(action: dict, action_repr: str) -> GoldPlay:
    """A step of a generated task file, judged as the server's `validate.judge` does."""
    operation = action["operation"]
    gold = GoldStep(operation["op"], operation["value"],
                    frozenset(c["backend_node_id"] for c in action["pos_candidates"]), action_repr)
    snapshot = build_snapshot(action["cleaned_html"])
    good = expected_refs(gold, snapshot, REFERENCE_FALLBACK)
    right = {"op": operation["op"], "ref": good[0], "value": operation["value"]}
    wrong = {**right, "ref": next(e.ref for e in snapshot.elements if e.ref not in good)}
    return GoldPlay(snapshot.text, right, wrong, bool(gold.positive_ids))


def gold_book(root: Path, prepared_dir: Path) -> dict[str, list[GoldPlay]]:
    """Prepared question -> the steps of its task, over every prepared split (each row names
    its source file, relative to `root`, and its index there); questions are unique here."""
    files: dict[str, list[dict]] = {}
    book: dict[str, list[GoldPlay]] = {}
    for split_file in sorted(prepared_dir.glob("*.jsonl")):
        for line in split_file.read_text().splitlines():
            row = json.loads(line)
            meta = row["metadata"]
            if meta["source_file"] not in files:
                files[meta["source_file"]] = json.loads((root / meta["source_file"]).read_text())
            task = files[meta["source_file"]][meta["task_index"]]
            plays = [_play(action, action_repr) for action, action_repr
                     in zip(task["actions"], task["action_reprs"], strict=True)]
            assert book.setdefault(row["question"], plays) == plays, row["question"]
    return book


@dataclass
class WebSolver:
    """The scripted solver: the right action with the good skill or before step `WRONG_AT`, else
    a wrong one; a prompt whose page is not the generated one is recorded in `misses`."""

    book: dict[str, list[GoldPlay]]
    misses: list[str] = dataclasses.field(default_factory=list)

    def __call__(self, prompt: str) -> str:
        question = _QUESTION.search(prompt).group(1)
        step_match = _STEP.search(prompt)
        step, snapshot = int(step_match.group(1)), step_match.group(2)
        play = self.book[question][step]
        if play.snapshot != snapshot:
            self.misses.append(f"{question} step {step}")
        action = play.right if self.expected_correct(GOOD_CARD in prompt, step) else play.wrong
        return f"<reasoning>scripted</reasoning><action>{json.dumps(action)}</action>"

    def expected_correct(self, card_is_good: bool, step: int) -> bool:
        return card_is_good or step < WRONG_AT

    def expected_score(self, question: str, card_is_good: bool) -> float:
        """The fraction of the task's steps an episode gets right (train mode)."""
        n_steps = len(self.book[question])
        return 1.0 if card_is_good else min(WRONG_AT, n_steps) / n_steps


