"""Rendering of a sampled task + room into ALFWorld's on-disk game format.

Owns the two files of a game folder, byte for byte: `game.tw-pddl` (JSON: `pddl_domain` from
alfworld's shipped `alfred.pddl`, `grammar` from `alfred.twl2` with "UNKNOWN GOAL" replaced by the
task sentence exactly as `alfworld.agents.utils.misc.add_task_to_grammar` does, `pddl_problem`,
`solvable`, `walkthrough`) and `traj_data.json` (ALFRED's `task_type`, `pddl_params`, `scene`,
`turk_annotations`). Goals come from alfworld's own `goal_library`; ids are mangled the way
ALFRED's planner state writer does (`|` → `_bar_`, `-` → `_minus_`, …).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import alfworld
import alfworld.gen.constants as alf_constants
import alfworld.gen.goal_library as goal_library

from env.alfworld.gen_scene import Room
from env.alfworld.gen_task import TaskSpec

ALFWORLD_LOGIC = Path(alfworld.__file__).resolve().parent / "data"
#: Type constants the alfred domain's actions name; every problem must declare them.
DOMAIN_OTYPES = ("KnifeType", "ButterKnifeType")
DOMAIN_RTYPES = ("SinkBasinType", "MicrowaveType", "FridgeType")
_MANGLE = (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_"))


@dataclass(frozen=True)
class GameFiles:
    """The contents of one game folder before proof (walkthrough not yet known)."""

    folder: str
    trial: str
    game: dict
    traj_data: dict
    task_sentence: str


def mangle(name: str) -> str:
    for char, word in _MANGLE:
        name = name.replace(char, word)
    return name


def load_logic() -> tuple[str, str]:
    """alfworld's shipped PDDL domain and text grammar."""
    return ((ALFWORLD_LOGIC / "alfred.pddl").read_text(),
            (ALFWORLD_LOGIC / "alfred.twl2").read_text())


def task_sentence(rng: random.Random, spec: TaskSpec) -> str:
    """One of alfworld's templates for the goal, filled in like `get_templated_task_desc`."""
    template = rng.choice(goal_library.gdict[spec.task_type]["templates"])
    return template.format(obj=spec.object_target.lower(), recep=spec.parent_target.lower(),
                           toggle=spec.toggle_target.lower(), mrecep=spec.mrecep_target.lower())


def _goal(spec: TaskSpec) -> str:
    text = goal_library.gdict[spec.task_type]["pddl"].replace("#", "-")
    return text.format(obj=spec.object_target, recep=spec.parent_target,
                       toggle=spec.toggle_target, mrecep=spec.mrecep_target)


def _object_facts(room: Room, lamp: str) -> list[str]:
    facts = []
    for item in room.items:
        oid = mangle(item.id)
        facts.append(f"(objectType {oid} {item.cls}Type)")
        if item.cls == lamp:
            facts.append(f"(toggleable {oid})")
        else:
            facts.append(f"(pickupable {oid})")
        if item.cls in alf_constants.MOVABLE_RECEPTACLES_SET:
            facts.append(f"(isReceptacleObject {oid})")
        for prop in ("Cleanable", "Heatable", "Coolable", "Sliceable"):
            if item.cls in alf_constants.VAL_ACTION_OBJECTS[prop]:
                facts.append(f"({prop.lower()} {oid})")
        loc = mangle(item.receptacle.location)
        facts.append(f"(inReceptacle {oid} {mangle(item.receptacle.id)})")
        facts.append(f"(objectAtLocation {oid} {loc})")
    return facts


def _init_facts(room: Room, lamp: str) -> list[str]:
    facts = [f"(atLocation agent1 {mangle(room.agent_location)})"]
    for rec in room.receptacles:
        rid = mangle(rec.id)
        facts.append(f"(receptacleType {rid} {rec.cls}Type)")
        facts.append(f"(receptacleAtLocation {rid} {mangle(rec.location)})")
        if rec.cls in alf_constants.OPENABLE_CLASS_SET:
            facts.append(f"(openable {rid})")
    rtypes = sorted({r.cls for r in room.receptacles})
    otypes = sorted({i.cls for i in room.items if i.cls != lamp})
    facts += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes
              if o in alf_constants.VAL_RECEPTACLE_OBJECTS.get(r, ())]
    return facts + _object_facts(room, lamp)


def problem_text(name: str, spec: TaskSpec, room: Room) -> str:
    """The PDDL problem of one game for the alfred domain."""
    otypes = sorted({f"{i.cls}Type" for i in room.items} | set(DOMAIN_OTYPES))
    rtypes = sorted({f"{r.cls}Type" for r in room.receptacles} | set(DOMAIN_RTYPES))
    locations = sorted({r.location for r in room.receptacles} | {room.agent_location})
    declared = (["agent1 - agent"] + [f"{t} - otype" for t in otypes]
                + [f"{t} - rtype" for t in rtypes]
                + [f"{mangle(i.id)} - object" for i in room.items]
                + [f"{mangle(r.id)} - receptacle" for r in room.receptacles]
                + [f"{mangle(loc)} - location" for loc in locations])
    init = _init_facts(room, spec.toggle_target)
    indent = "\n        "
    return (f"(define (problem {name})\n    (:domain alfred)\n    (:objects{indent}"
            f"{indent.join(declared)}\n    )\n    (:init{indent}{indent.join(init)}\n    )\n"
            f"{_goal(spec)}")


def traj_data(spec: TaskSpec, room: Room, trial: str, sentence: str, seed: int) -> dict:
    """ALFRED-style `traj_data.json`: what the text engine and AlfredTWEnv read."""
    _, gx, gz, rot, horizon = room.agent_location.split("|")
    return {
        "task_id": trial,
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.object_target, "parent_target": spec.parent_target,
            "toggle_target": spec.toggle_target, "mrecep_target": spec.mrecep_target,
            "object_sliced": spec.object_sliced,
        },
        "scene": {
            "floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene,
            "random_seed": seed, "dirty_and_empty": False, "object_poses": [],
            "object_toggles": [],
            "init_action": {"action": "TeleportFull", "x": int(gx) * 0.25, "z": int(gz) * 0.25,
                            "rotation": int(rot) * 90, "horizon": int(horizon)},
        },
        "turk_annotations": {"anns": [{"assignment_id": "generated", "task_desc": sentence,
                                       "high_descs": [], "votes": []}]},
        "generator": {"name": "evolving_rl", "alfworld": version("alfworld"), "seed": seed},
    }


def game_files(rng: random.Random, spec: TaskSpec, room: Room, seed: int,
               logic: tuple[str, str]) -> GameFiles:
    """Both files of a game; `walkthrough`/`solvable` are filled in once the planner proves it."""
    digits = f"{seed:020d}"
    trial = f"trial_T{digits[:8]}_{digits[8:14]}_{digits[14:20]}"
    second = spec.toggle_target or spec.parent_target
    folder = (f"{spec.task_type}-{spec.object_target}-{spec.mrecep_target or 'None'}-"
              f"{second}-{spec.scene}")
    sentence = task_sentence(rng, spec)
    domain, grammar = logic
    game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", sentence),
            "pddl_problem": problem_text(f"plan_{trial}", spec, room),
            "solvable": False, "walkthrough": None}
    return GameFiles(folder, trial, game, traj_data(spec, room, trial, sentence, seed), sentence)
