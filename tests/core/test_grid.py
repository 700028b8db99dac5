"""Tests for evolving_rl.core.grid: N x K x R index arithmetic and group ids."""

import itertools

import pytest

from evolving_rl.core.grid import (
    Cell,
    Grid,
    baseline_group_id,
    extractor_group_id,
    solver_group_id,
)

SHAPES = [(1, 1, 1), (8, 4, 1), (3, 2, 5), (2, 5, 3), (1, 4, 2), (4, 1, 1)]


@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_over_all_indices(shape):
    grid = Grid(*shape)
    assert grid.size == shape[0] * shape[1] * shape[2]
    for index in range(grid.size):
        assert grid.index(*grid.coords(index)) == index
    for n, k, r in itertools.product(*(range(d) for d in shape)):
        assert grid.coords(grid.index(n, k, r)) == (n, k, r)


@pytest.mark.parametrize("shape", SHAPES)
def test_skill_major_order(shape):
    grid = Grid(*shape)
    expected = list(itertools.product(*(range(d) for d in shape)))
    assert list(grid.cells()) == expected
    n, k, r = shape
    assert all(grid.index(a, b, c) == (a * k + b) * r + c for a, b, c in expected)


def test_cell_fields():
    cell = Grid(3, 2, 5).coords(17)
    assert cell == Cell(skill=1, task=1, repeat=2)
    assert (cell.skill, cell.task, cell.repeat) == (1, 1, 2)


@pytest.mark.parametrize("shape", SHAPES)
def test_skill_and_task_episodes_partition_the_grid(shape):
    grid = Grid(*shape)
    n_skills, top_k, n_repeats = shape
    by_skill = [grid.skill_episodes(n) for n in range(n_skills)]
    by_task = [grid.task_episodes(k) for k in range(top_k)]
    assert sorted(i for group in by_skill for i in group) == list(range(grid.size))
    assert sorted(i for group in by_task for i in group) == list(range(grid.size))
    for n, episodes in enumerate(by_skill):
        assert len(episodes) == top_k * n_repeats
        assert all(grid.coords(i).skill == n for i in episodes)
        assert list(episodes) == list(range(episodes[0], episodes[0] + len(episodes)))
    for k, episodes in enumerate(by_task):
        assert len(episodes) == n_skills * n_repeats
        assert all(grid.coords(i).task == k for i in episodes)


def test_task_episodes_exact():
    assert Grid(3, 2, 2).task_episodes(1) == (2, 3, 6, 7, 10, 11)
    assert Grid(3, 2, 2).skill_episodes(2) == (8, 9, 10, 11)


@pytest.mark.parametrize(
    "coords", [(-1, 0, 0), (3, 0, 0), (0, -1, 0), (0, 2, 0), (0, 0, -1), (0, 0, 2)]
)
def test_index_out_of_range(coords):
    with pytest.raises(IndexError):
        Grid(3, 2, 2).index(*coords)


@pytest.mark.parametrize("index", [-1, 12, 100])
def test_coords_out_of_range(index):
    with pytest.raises(IndexError):
        Grid(3, 2, 2).coords(index)


def test_episode_helpers_out_of_range():
    with pytest.raises(IndexError):
        Grid(3, 2, 2).skill_episodes(3)
    with pytest.raises(IndexError):
        Grid(3, 2, 2).task_episodes(2)


@pytest.mark.parametrize("value", [1.0, "1", True, None])
def test_non_int_coordinates_rejected(value):
    with pytest.raises(TypeError):
        Grid(3, 2, 2).index(value, 0, 0)
    with pytest.raises(TypeError):
        Grid(3, 2, 2).coords(value)


@pytest.mark.parametrize(
    "shape", [(0, 1, 1), (1, 0, 1), (1, 1, 0), (-2, 1, 1), (2.0, 1, 1), (True, 1, 1)]
)
def test_invalid_shape(shape):
    with pytest.raises(ValueError):
        Grid(*shape)


def test_grid_is_frozen_and_hashable():
    grid = Grid(2, 2, 2)
    with pytest.raises(AttributeError):
        grid.top_k = 3
    assert {grid: 1}[Grid(2, 2, 2)] == 1


def test_group_ids():
    assert extractor_group_id("task-7") == "extractor/task-7"
    assert solver_group_id("task-7", 3) == "solver/task-7/3"
    assert solver_group_id("a/1", 2) != solver_group_id("a", 12)
    assert extractor_group_id("x") != solver_group_id("x", 0)


@pytest.mark.parametrize("task", [-1, 1.0, True])
def test_solver_group_id_rejects_bad_task(task):
    with pytest.raises(ValueError):
        solver_group_id("t", task)


def test_solver_group_ids_aligned_with_flat_index():
    grid = Grid(3, 2, 2)
    ids = grid.solver_group_ids("src")
    assert len(ids) == grid.size
    for index, group_id in enumerate(ids):
        assert group_id == solver_group_id("src", grid.coords(index).task)
    for k in range(grid.top_k):
        members = [i for i, gid in enumerate(ids) if gid == f"solver/src/{k}"]
        assert tuple(members) == grid.task_episodes(k)


def test_baseline_group_is_one_per_source_and_never_a_solver_group():
    assert baseline_group_id("0:t1") == "baseline/0:t1"
    assert baseline_group_id("0:t1") != baseline_group_id("1:t1")
    ids = {solver_group_id(source, k) for source in ("a", "a/0", "baseline") for k in range(3)}
    assert not ids & {baseline_group_id(s) for s in ("a", "a/0", "0", "baseline")}


@pytest.mark.parametrize(("n", "k", "r", "episodes"), [(1, 1, 1, 2), (3, 2, 2, 13), (8, 4, 1, 33)])
def test_solver_episodes_per_source_counts_source_and_grid(n, k, r, episodes):
    assert Grid(n, k, r).solver_episodes_per_source == episodes
