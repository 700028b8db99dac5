"""Synthetic prepared splits of ALFWorld-like tasks, for retrieval tests and benchmarks.

Owns a deterministic generator of task sentences (six ALFWorld task types × objects ×
receptacles × phrasings) written in the prepared-dataset contract (`<split>.jsonl` rows with
`id`, `question`, `prompt`, `metadata`), including the overlap of ALFWorld's splits: `train`
holds every row of `train_seen` and `train_unseen`. Also makes query sentences that are phrased
differently from every indexed task, so that a server must encode them online.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

OBJECTS = ("mug", "apple", "potato", "tomato", "egg", "bread", "lettuce", "knife", "fork",
           "spoon", "plate", "bowl", "cup", "pan", "pot", "kettle", "book", "pencil", "pen",
           "cd", "cellphone", "keychain", "creditcard", "watch", "vase", "statue", "candle",
           "soapbar", "cloth", "towel", "spraybottle", "dishsponge", "remotecontrol", "pillow")
RECEPTACLES = ("countertop", "diningtable", "sidetable", "coffeetable", "desk", "shelf",
               "drawer", "cabinet", "fridge", "microwave", "sinkbasin", "garbagecan", "sofa",
               "armchair", "bed", "dresser", "safe", "cart", "toilet", "bathtubbasin",
               "coffeemachine", "stoveburner")
LAMPS = ("desklamp", "floorlamp")
TEMPLATES = {
    "pick_and_place_simple": ("put a {o} in {r}.", "put some {o} on {r}."),
    "pick_clean_then_place_in_recep": ("put a clean {o} in {r}.",
                                       "clean some {o} and put it in {r}."),
    "pick_heat_then_place_in_recep": ("put a hot {o} in {r}.", "heat some {o} and put it in {r}."),
    "pick_cool_then_place_in_recep": ("put a cool {o} in {r}.", "cool some {o} and put it in {r}."),
    "pick_two_obj_and_place": ("put two {o} in {r}.", "find two {o} and put them in {r}."),
    "look_at_obj_in_light": ("look at {o} under the {r}.", "examine the {o} with the {r}."),
}
QUERY_TEMPLATES = ("could you please {verb} the {o} and leave it at the {r}?",
                   "i need the {o} {done} and then placed at the {r} today")
QUERY_VERBS = (("clean", "cleaned"), ("heat", "heated"), ("cool", "cooled"), ("move", "moved"),
               ("take", "taken"), ("inspect", "inspected"))
SPLIT_SHARES = (("train_seen", 0.7), ("train_unseen", 0.1), ("valid_seen", 0.1),
                ("valid_unseen", 0.1))


def task_sentences(seed: int = 0) -> list[tuple[str, str]]:
    """Every (task_type, sentence) the generator can make, shuffled deterministically."""
    out = []
    for task_type, templates in TEMPLATES.items():
        places = LAMPS if task_type == "look_at_obj_in_light" else RECEPTACLES
        for template, obj, place in itertools.product(templates, OBJECTS, places):
            out.append((task_type, template.format(o=obj, r=place)))
    random.Random(seed).shuffle(out)
    return out


def make_split_rows(n_tasks: int, seed: int = 0) -> dict[str, list[dict]]:
    """`n_tasks` unique tasks spread over the splits; `train` = train_seen ∪ train_unseen."""
    sentences = task_sentences(seed)
    if n_tasks > len(sentences):
        raise ValueError(f"at most {len(sentences)} distinct synthetic tasks, asked {n_tasks}")
    splits: dict[str, list[dict]] = {name: [] for name, _ in SPLIT_SHARES}
    bounds = list(itertools.accumulate(int(share * n_tasks) for _, share in SPLIT_SHARES))
    for i, (task_type, question) in enumerate(sentences[:n_tasks]):
        split = next((name for (name, _), b in zip(SPLIT_SHARES, bounds, strict=True) if i < b),
                     SPLIT_SHARES[-1][0])
        game = f"json_2.1.1/{split}/{task_type}-{i:05d}/trial_{i:05d}/game.tw-pddl"
        splits[split].append({
            "id": f"{task_type}-{i:05d}", "question": question,
            "prompt": f"Your task is to: {question}",
            "metadata": {"split": split, "task_type": task_type, "game": game},
        })
    splits["train"] = [dict(r, metadata=dict(r["metadata"], split="train"))
                       for r in splits["train_seen"] + splits["train_unseen"]]
    return splits


def write_prepared_splits(out_dir: str | Path, n_tasks: int, seed: int = 0) -> dict[str, int]:
    """Write `<out_dir>/<split>.jsonl`; returns the row count per split."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, rows in make_split_rows(n_tasks, seed).items():
        with (out_dir / f"{split}.jsonl").open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        counts[split] = len(rows)
    return counts


def unseen_queries(n: int, seed: int = 1) -> list[str]:
    """`n` distinct query sentences phrased unlike any generated task."""
    combos = list(itertools.product(QUERY_TEMPLATES, QUERY_VERBS, OBJECTS, RECEPTACLES))
    random.Random(seed).shuffle(combos)
    if n > len(combos):
        raise ValueError(f"at most {len(combos)} distinct queries, asked {n}")
    return [t.format(verb=v, done=d, o=o, r=r) for t, (v, d), o, r in combos[:n]]
