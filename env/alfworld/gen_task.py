"""Task sampling for the ALFWorld game generator: which task, in which room, with which objects.

Owns the rules of the six ALFWorld task types (which room types allow them, which object
property and appliance each needs, ALFRED's `GOALS_VALID`) and the difficulty knob
`RoomLimits`: how many receptacle instances and how many objects a sampled room holds. The
targets are always placed outside any receptacle of the goal class, so no game starts won.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import alfworld.gen.constants as alf_constants

from env.alfworld.gen_scene import (
    LAMP_HOSTS,
    LAMPS,
    Item,
    Receptacle,
    Room,
    Scene,
    agent_start,
    can_contain,
    load_scene,
    new_item,
    receptacle_pool,
    split_scenes,
)

#: Object property and appliance each state-changing task needs.
APPLIANCE = {
    "pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
    "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
    "pick_cool_then_place_in_recep": ("Coolable", "Fridge"),
}


@dataclass(frozen=True)
class RoomLimits:
    """Difficulty knob: a room holds at most `max_receptacles` receptacle instances (those the
    task needs always included) and at most `max_objects` objects (targets included). Fewer of
    each gives shorter intros, fewer admissible commands and less to search: what a small policy
    model can play. ALFRED rooms have ~10-40 receptacles and ~10-60 objects; the floor (2 and 1)
    leaves only what the task needs, which the limits never remove."""

    max_receptacles: int = 10
    max_objects: int = 8

    def __post_init__(self) -> None:
        if self.max_receptacles < 2 or self.max_objects < 1:
            raise ValueError("RoomLimits needs max_receptacles >= 2 and max_objects >= 1")


@dataclass(frozen=True)
class TaskSpec:
    """ALFRED `pddl_params` plus the scene: what the goal asks for."""

    task_type: str
    scene: int
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""
    mrecep_target: str = ""
    object_sliced: bool = False


def _candidates(task_type: str, scene: Scene) -> list[TaskSpec]:
    objects = sorted(scene.object_classes)
    receptacles = sorted(scene.receptacle_classes)
    if task_type == "look_at_obj_in_light":
        lamps = sorted(scene.classes & set(LAMPS))
        if not lamps or not scene.receptacle_classes & set(LAMP_HOSTS):
            return []
        return [TaskSpec(task_type, scene.number, obj, toggle_target=lamps[0]) for obj in objects
                if any(can_contain(r, obj) for r in receptacles)]
    prop, appliance = APPLIANCE.get(task_type, ("", ""))
    if appliance and appliance not in scene.receptacle_classes:
        return []
    wanted = alf_constants.VAL_ACTION_OBJECTS[prop] if prop else objects
    specs = []
    for obj in objects:
        if obj not in wanted:
            continue
        for recep in receptacles:
            starts = [r for r in receptacles if r not in (recep, appliance) and can_contain(r, obj)]
            if recep != appliance and can_contain(recep, obj) and starts:
                specs.append(TaskSpec(task_type, scene.number, obj, parent_target=recep))
    return specs


def sample_task(rng: random.Random, task_type: str, split: str) -> TaskSpec:
    """A task of `task_type` in a floor plan of `split` whose room type allows it."""
    allowed = alf_constants.GOALS_VALID[task_type]
    scenes = [n for n in split_scenes(split) if load_scene(n).room_type in allowed]
    rng.shuffle(scenes)
    for number in scenes:
        specs = _candidates(task_type, load_scene(number))
        if specs:
            return rng.choice(specs)
    raise ValueError(f"no scene of split {split} allows {task_type}")


def _pick(rng: random.Random, pool: list[Receptacle], ok) -> Receptacle:
    return rng.choice([r for r in pool if ok(r)])


def build_room(rng: random.Random, spec: TaskSpec, limits: RoomLimits) -> Room:
    """Sample receptacles and objects for `spec` within `limits`."""
    scene = load_scene(spec.scene)
    pool = receptacle_pool(rng, scene)
    appliance = APPLIANCE.get(spec.task_type, ("", ""))[1]
    avoid = {spec.parent_target, appliance}
    n_targets = rng.randint(2, 3) if spec.task_type == "pick_two_obj_and_place" else 1
    target = spec.object_target
    starts = [_pick(rng, pool, lambda r: r.cls not in avoid and can_contain(r.cls, target))
              for _ in range(n_targets)]
    required = list(starts)
    for cls in (spec.parent_target, appliance):
        if cls:
            required.append(_pick(rng, pool, lambda r, c=cls: r.cls == c))
    host = None
    if spec.toggle_target:
        host = _pick(rng, pool, lambda r: r.cls in LAMP_HOSTS)
        required.append(host)
    chosen = list(dict.fromkeys(required))
    rest = [r for r in pool if r not in chosen]
    rng.shuffle(rest)
    chosen += rest[:max(0, limits.max_receptacles - len(chosen))]
    room = Room(scene=scene, receptacles=sorted(chosen, key=lambda r: r.id))
    taken: set[str] = set()
    room.items = [new_item(rng, spec.object_target, r, taken) for r in starts]
    if host is not None:
        room.items.append(new_item(rng, spec.toggle_target, host, taken))
    room.items += _distractors(rng, spec, room, limits.max_objects - n_targets, taken)
    room.agent_location = agent_start(rng, room)
    return room


def _distractors(rng: random.Random, spec: TaskSpec, room: Room, budget: int,
                 taken: set[str]) -> list[Item]:
    """Up to `budget` objects of other classes, each in a receptacle that can hold it."""
    classes = sorted(room.scene.object_classes - {spec.object_target})
    items: list[Item] = []
    for _ in range(rng.randint(budget // 2, max(budget, 0))):
        cls = rng.choice(classes)
        hosts = [r for r in room.receptacles if can_contain(r.cls, cls)]
        if hosts:
            items.append(new_item(rng, cls, rng.choice(hosts), taken))
    return items
