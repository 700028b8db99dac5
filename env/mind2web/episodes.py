"""Live Mind2Web episodes: replaying one task step by step.

Owns episode state and the two modes. "train" (the reference's environment) ends the episode at
the first wrong step; "eval" is teacher-forced: a wrong step is recorded and the episode moves on
along the gold path, so every step is scored (MindAct's step metrics). An episode is won when it
is done and every step was correct; a step is judged under the episode's empty-positive rule
(`env.mind2web.validate`). The server holds its live episodes in the servers' one episode table
(`env.episodes`: capacity, idle TTL, random ids).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from env.mind2web.store import TaskKey, TaskStore
from env.mind2web.validate import Action, Result, judge
from evolving_rl.domains.mind2web_metrics import STANDARD

MODES = ("train", "eval")


@dataclass
class Episode:
    """One replay of one task; `step` is the index of the step to act on now."""

    key: TaskKey
    mode: str
    rule: str = STANDARD
    step: int = 0
    steps_correct: int = 0
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def act(self, store: TaskStore, action: Action) -> Result:
        """Judge `action` on the current step and advance (caller holds `lock`)."""
        task = store.task(self.key)
        result = judge(task.steps[self.step].gold, store.snapshot(self.key, self.step), action,
                       self.rule)
        self.steps_correct += int(result.correct)
        if result.correct or self.mode == "eval":
            self.step += 1
        self.done = self.step >= len(task.steps) or not result.correct and self.mode == "train"
        return result

    def view(self, store: TaskStore, episode_id: str) -> dict[str, Any]:
        """The episode view of the wire contract."""
        task = store.task(self.key)
        n_steps = len(task.steps)
        observation = "" if self.done else store.snapshot(self.key, self.step).text
        return {"episode_id": episode_id, "task_id": task.annotation_id,
                "task": task.confirmed_task, "website": task.website, "domain": task.domain,
                "subdomain": task.subdomain, "step": self.step, "n_steps": n_steps,
                "observation": observation,
                "previous_actions": list(task.action_reprs[:min(self.step, n_steps)]),
                "done": self.done, "won": self.done and self.steps_correct == n_steps,
                "steps_correct": self.steps_correct}


def result_json(result: Result) -> dict[str, Any]:
    return asdict(result)
