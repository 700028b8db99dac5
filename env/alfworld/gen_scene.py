"""Scene catalog and room sampling for the ALFWorld game generator.

Owns everything taken from the floor plans that the `alfworld` package ships
(`alfworld/gen/layouts/FloorPlan<N>-{objects,openable,layout}` and `alfworld/gen/constants.py`):
which object and receptacle classes a scene holds, its openable receptacle instances and their
poses, its navigable points, which receptacle class can hold which object class, and the
seen/unseen scene split (ALFRED's train vs test floor plans). It also owns the instances of a
room: receptacles and objects with ALFRED-style ids (`Cabinet|+00.68|+00.50|-02.20`,
`Sink|…|SinkBasin`), one distinct location per receptacle, and an agent start location that is no
receptacle's (else the intro lists nothing).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import alfworld.gen.constants as alf_constants
import numpy as np

LAYOUTS_DIR = Path(alf_constants.__file__).resolve().parent / "layouts"
GRID = alf_constants.AGENT_STEP_SIZE
HORIZONS = (-30, 0, 15, 30, 45, 60)

#: Receptacle classes a lamp (the toggle target of look_at_obj_in_light) may stand on.
LAMP_HOSTS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable")
LAMPS = ("DeskLamp", "FloorLamp")
#: Basins are named after their fixture (`Sink|…|SinkBasin`), as in ALFRED; the text engine
#: appends "basin" to the fixture name, so any other naming comes out as "sinkbasinbasin".
BASIN_FIXTURE = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}

STATIC_RECEPTACLES = frozenset(alf_constants.VAL_RECEPTACLE_OBJECTS) - set(
    alf_constants.MOVABLE_RECEPTACLES)
PICKUPABLE = frozenset(
    cls for contents in alf_constants.VAL_RECEPTACLE_OBJECTS.values() for cls in contents
    if not cls.endswith("Sliced")) - STATIC_RECEPTACLES


@dataclass(frozen=True)
class Scene:
    """One ALFRED floor plan as shipped by alfworld."""

    number: int
    room_type: str
    classes: frozenset[str]
    openables: tuple[tuple[str, tuple[float, float, int, int]], ...]
    points: tuple[tuple[float, float], ...]

    @property
    def receptacle_classes(self) -> frozenset[str]:
        return self.classes & STATIC_RECEPTACLES

    @property
    def object_classes(self) -> frozenset[str]:
        return self.classes & PICKUPABLE


@dataclass(frozen=True)
class Receptacle:
    """A receptacle instance: ALFRED id, class and the location the agent reaches it at."""

    id: str
    cls: str
    location: str


@dataclass(frozen=True)
class Item:
    """An object instance lying in a receptacle (`pickupable` unless it is a lamp)."""

    id: str
    cls: str
    receptacle: Receptacle


@dataclass
class Room:
    """A sampled room: receptacles, objects and the agent's start location."""

    scene: Scene
    receptacles: list[Receptacle] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    agent_location: str = ""


def room_type(scene_number: int) -> str:
    return next(name for name, numbers in alf_constants.SCENE_TYPE.items()
                if scene_number in numbers)


def split_scenes(split: str) -> list[int]:
    """Floor plans of a split: valid_unseen uses ALFRED's held-out (test) rooms only."""
    if split == "valid_unseen":
        return sorted(alf_constants.TEST_SCENE_NUMBERS)
    return sorted(alf_constants.TRAIN_SCENE_NUMBERS)


@cache
def load_scene(number: int) -> Scene:
    stem = LAYOUTS_DIR / f"FloorPlan{number}"
    classes = json.loads(Path(f"{stem}-objects.json").read_text())
    openable = json.loads(Path(f"{stem}-openable.json").read_text())
    points = np.load(f"{stem}-layout.npy")
    return Scene(
        number=number, room_type=room_type(number), classes=frozenset(classes),
        openables=tuple(sorted((key, tuple(pose)) for key, pose in openable.items())),
        points=tuple((float(x), float(z)) for x, z in points))


def can_contain(receptacle_cls: str, object_cls: str) -> bool:
    return object_cls in alf_constants.VAL_RECEPTACLE_OBJECTS.get(receptacle_cls, ())


def location_name(x: float, z: float, rotation: int, horizon: int) -> str:
    """ALFRED location id: grid coordinates, rotation in quarter turns, camera horizon."""
    return f"loc|{round(x / GRID)}|{round(z / GRID)}|{(rotation // 90) % 4}|{horizon}"


def _coords(rng: random.Random, x: float, z: float) -> str:
    y = rng.uniform(0.0, 1.6)
    return f"{x + rng.uniform(-0.5, 0.5):+06.2f}|{y:+06.2f}|{z + rng.uniform(-0.5, 0.5):+06.2f}"


def _receptacle_id(rng: random.Random, cls: str, x: float, z: float) -> str:
    fixture = BASIN_FIXTURE.get(cls)
    if fixture:
        return f"{fixture}|{_coords(rng, x, z)}|{cls}"
    return f"{cls}|{_coords(rng, x, z)}"


def _free_location(rng: random.Random, scene: Scene, used: set[str]) -> str:
    for _ in range(1000):
        x, z = rng.choice(scene.points)
        name = location_name(x, z, rng.randrange(4) * 90, rng.choice(HORIZONS))
        if name not in used:
            used.add(name)
            return name
    raise ValueError(f"FloorPlan{scene.number}: no free location left")


def _openable_instances(rng: random.Random, scene: Scene, used: set[str]) -> list[Receptacle]:
    found = []
    for key, (x, z, rotation, horizon) in scene.openables:
        cls = key.split("|", 1)[0]
        if cls not in STATIC_RECEPTACLES:
            continue
        name = location_name(x, z, int(rotation), int(horizon))
        if name in used:
            name = _free_location(rng, scene, used)
        used.add(name)
        found.append(Receptacle(key, cls, name))
    return found


def receptacle_pool(rng: random.Random, scene: Scene) -> list[Receptacle]:
    """Every receptacle instance of a scene: the shipped openables plus one of each other class."""
    used: set[str] = set()
    pool = _openable_instances(rng, scene, used)
    have = {r.cls for r in pool}
    for cls in sorted(scene.receptacle_classes - have):
        x, z = rng.choice(scene.points)
        pool.append(Receptacle(_receptacle_id(rng, cls, x, z), cls,
                               _free_location(rng, scene, used)))
    return pool


def new_item(rng: random.Random, cls: str, receptacle: Receptacle, taken: set[str]) -> Item:
    """An object instance in `receptacle` with an id unique within the room."""
    _, gx, gz, _, _ = receptacle.location.split("|")
    while True:
        item_id = f"{cls}|{_coords(rng, int(gx) * GRID, int(gz) * GRID)}"
        if item_id not in taken:
            taken.add(item_id)
            return Item(item_id, cls, receptacle)


def agent_start(rng: random.Random, room: Room) -> str:
    """A start location that is no receptacle's location."""
    return _free_location(rng, room.scene, {r.location for r in room.receptacles})
