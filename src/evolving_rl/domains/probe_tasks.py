"""The probe's tasks, generated on the fly from a seed: which answer wins, and what each says.

Owns `ProbeTask` and everything derived from `(probe.seed, task id)`: nothing is stored, so the
server, the data preparation and the adapter's hand-written cards (`domains/probe.py`) generate the
same task from its id. Pure: it imports only the standard library (the env server and the
adapter both import it) and reads the `probe` config section through `ProbeSettings`. Answers
are named `1`..`M` (`probe.n_answers`), one character each. Two kinds (`probe.kind`):

- `stated`: ids `stated-<split>-<index>`; the observation ends by stating the winning answer
  (a hash of seed and id), so a policy that reads it wins every task and one that ignores it
  wins 1/M. Its question names the case in words (`case_name`): the stated answer is the one
  digit that differs between tasks.
- `hidden`: ids `hidden-<split>-f<family>-<index>`; tasks come in families that share one
  answer (a hash of seed and family), which the observation never states; the feedback after
  the episode's one answer reveals it. The question names the family (a word of `FAMILY_WORDS`),
  so dense retrieval returns tasks of the same family. The valid split's families are not the
  train split's: a policy can learn the train families' answers into its weights, never the
  held-out ones', so without a skill it stays at 1/M there.

`split_rows` lists a split's tasks as prepared rows (`{id, question, prompt, metadata}`, no
answer in them); `task_for` parses an id back (`None` for an id this seed and config never made).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Protocol


class ProbeSettings(Protocol):
    """The fields of the `probe` config section (`config.schema.ProbeConfig`) tasks derive from."""

    @property
    def kind(self) -> str: ...
    @property
    def n_answers(self) -> int: ...
    @property
    def n_families(self) -> int: ...
    @property
    def train_tasks(self) -> int: ...
    @property
    def valid_tasks(self) -> int: ...
    @property
    def family_answers(self) -> str: ...
    @property
    def seed(self) -> int: ...


SPLITS = ("train", "valid")
FAMILY_WORDS = (
    "heron", "maple", "cobalt", "walrus", "saffron", "granite", "lantern", "orchid", "falcon",
    "quartz", "thistle", "bison", "harbor", "juniper", "meadow", "nickel", "otter", "pepper",
    "raven", "sequoia", "tundra", "violet", "willow", "zephyr", "amber", "basalt", "cedar",
    "dune", "ember", "fjord", "glacier", "hazel")
_ID = re.compile(r"(stated|hidden)-(train|valid)-(?:f(\d{1,4})-)?(\d{1,6})", re.ASCII)


@dataclass(frozen=True)
class ProbeTask:
    """One probe task: its id, kind, split, family (hidden kind; -1 for stated) and answer."""

    id: str
    kind: str
    split: str
    family: int
    answer: int
    n_answers: int

    @property
    def family_name(self) -> str:
        return family_name(self.family)

    @property
    def question(self) -> str:
        if self.kind == "stated":
            return f"Pick the answer the {case_name(int(self.id.rsplit('-', 1)[1]))} case states."
        return f"Pick the winning answer of the {self.family_name} family."

    @property
    def answers(self) -> tuple[str, ...]:
        return tuple(str(n) for n in range(1, self.n_answers + 1))

    def observation(self) -> str:
        """What the solver sees before answering."""
        listed = ", ".join(self.answers)
        if self.kind == "stated":
            return f"Answers: {listed}.\nThe winning answer is {self.answer}"
        return (f"Answers: {listed}.\nThe {self.family_name} family has one winning answer, "
                "the same for every case of the family.")

    def feedback(self, chosen: str) -> str:
        """What the episode's one answer gets back: right or wrong, and the winning answer."""
        verdict = "Right" if self.won(chosen) else "Wrong"
        whose = f"the {self.family_name} family's" if self.kind == "hidden" else "the"
        return f"{verdict}: {whose} winning answer is {self.answer}."

    def won(self, chosen: str) -> bool:
        return chosen == str(self.answer)

    def row(self) -> dict[str, Any]:
        """The prepared row (`retrieval.prepared`): no answer in it."""
        metadata: dict[str, Any] = {"task_type": self.kind, "split": self.split,
                                    "kind": self.kind, "n_answers": self.n_answers}
        if self.kind == "hidden":
            metadata["family"] = self.family_name
        return {"id": self.id, "question": self.question, "prompt": self.question,
                "metadata": metadata}


def family_name(family: int) -> str:
    """The family's word; past the list, the word with a number (every family named apart)."""
    word = FAMILY_WORDS[family % len(FAMILY_WORDS)]
    return word if family < len(FAMILY_WORDS) else f"{word}{family // len(FAMILY_WORDS)}"


def case_name(index: int) -> str:
    """A stated task's name: two words, no digit (the only digits a stated task shows are the
    answers and the one it states)."""
    words = len(FAMILY_WORDS)
    return f"{FAMILY_WORDS[index % words]} {FAMILY_WORDS[index // words % words]}"


def _draw(seed: int, *parts: object) -> int:
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def answer_of(cfg: ProbeSettings, kind: str, task_id: str, family: int) -> int:
    """The winning answer, 1..M: per task (stated) or per family (hidden)."""
    if kind == "stated":
        return 1 + _draw(cfg.seed, "task", task_id) % cfg.n_answers
    if cfg.family_answers == "balanced":
        split = "train" if family < cfg.n_families else "valid"
        order = sorted(_families(cfg, split), key=lambda f: (_draw(cfg.seed, "order", f), f))
        return 1 + order.index(family) % cfg.n_answers
    return 1 + _draw(cfg.seed, "family", family) % cfg.n_answers


def _families(cfg: ProbeSettings, split: str) -> range:
    """The hidden kind's families of a split: train's first, valid's after them."""
    start = 0 if split == "train" else cfg.n_families
    return range(start, start + cfg.n_families)


def _count(cfg: ProbeSettings, split: str) -> int:
    return cfg.train_tasks if split == "train" else cfg.valid_tasks


def make_task(cfg: ProbeSettings, split: str, index: int) -> ProbeTask:
    """Task `index` of `split` in the configured kind (hidden: families taken round-robin)."""
    if cfg.kind == "stated":
        task_id, family = f"stated-{split}-{index:04d}", -1
    else:
        family = _families(cfg, split)[index % cfg.n_families]
        task_id = f"hidden-{split}-f{family:02d}-{index:04d}"
    return ProbeTask(task_id, cfg.kind, split, family, answer_of(cfg, cfg.kind, task_id, family),
                     cfg.n_answers)


def stated_answer(answer: int, n_answers: int, wrong: bool) -> int:
    """The answer a hand-written card states: the family's, or (`wrong`) the next one."""
    return answer % n_answers + 1 if wrong else answer


def family_answers(cfg: ProbeSettings) -> dict[str, int]:
    """Hidden kind: every family of both splits, by name, -> its winning answer; stated: {}."""
    if cfg.kind != "hidden":
        return {}
    return {family_name(family): answer_of(cfg, "hidden", "", family)
            for split in SPLITS for family in _families(cfg, split)}


def split_rows(cfg: ProbeSettings, split: str) -> list[dict[str, Any]]:
    """Every task of `split` as a prepared row, in index order."""
    return [make_task(cfg, split, index).row() for index in range(_count(cfg, split))]


def task_for(cfg: ProbeSettings, task_id: str) -> ProbeTask | None:
    """The task an id names, or None when this config never generates that id."""
    match = _ID.fullmatch(task_id)
    if match is None or match[1] != cfg.kind:
        return None
    split, index = match[2], int(match[4])
    if index >= _count(cfg, split):
        return None
    task = make_task(cfg, split, index)
    return task if task.id == task_id else None
