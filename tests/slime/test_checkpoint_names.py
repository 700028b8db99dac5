"""The checkpoints the docs and eval scripts name are the ones slime saves for the train scripts'
schedules: slime saves after rollout ids where its periodic rule fires
(`should_run_periodic_action`, slime/utils/misc.py:107-128, called at train.py:71-72) as
iteration = rollout id (backends/megatron_utils/actor.py:584), in Megatron's `iter_%07d` folders
under --save, which the launch sets to $RUN_DIR/checkpoints."""

from __future__ import annotations

import pytest
from slime_fixtures import LAUNCH_LIB, ROOT, real_slime, script_defaults

SCHEDULES = {  # script -> (its default RUN_DIR under the repo, the checkpoint the docs name)
    "scripts/alfworld/train_alfworld.sh": ("runs/alfworld", "iter_0000149"),
    "scripts/web/train_web.sh": ("runs/mind2web", "iter_0000199"),
}
DOCS = {"scripts/alfworld/train_alfworld.sh": ("README.md", "scripts/alfworld/eval.sh"),
        "scripts/web/train_web.sh": ("README.md", "scripts/web/eval.sh")}


def _saved(num_rollout: int, save_interval: int) -> list[str]:
    from slime.utils.misc import should_run_periodic_action

    return [f"iter_{rollout_id:07d}" for rollout_id in range(num_rollout)
            if should_run_periodic_action(rollout_id, save_interval, None, num_rollout)]


@real_slime
@pytest.mark.parametrize("script", sorted(SCHEDULES))
def test_the_named_checkpoint_is_the_last_one_slime_saves(script):
    defaults = script_defaults((ROOT / script).read_text())
    saved = _saved(int(defaults["NUM_ROLLOUT"]), int(defaults["SAVE_INTERVAL"]))
    run_dir, named = SCHEDULES[script]
    assert saved[-1] == named and len(saved) == int(defaults["NUM_ROLLOUT"]) // int(
        defaults["SAVE_INTERVAL"])
    assert defaults["RUN_DIR"] == f"$ROOT/{run_dir}"
    assert 'SAVE_DIR="$(realpath -m "${SAVE_DIR:-$RUN_DIR/checkpoints}")"' in LAUNCH_LIB.read_text()
    for doc in DOCS[script]:
        assert f"{run_dir}/checkpoints/{named}" in (ROOT / doc).read_text(), doc
