"""Training rollouts sample with the training settings (`sampling.solver`, `sampling.extractor`),
never the evaluation ones (`sampling.eval_solver`: greedy by default). A training rollout sampled
greedily gives every GRPO group zero variance and nothing to learn; the learning canary
(tests/local/test_probe_canary.py) catches that too, but only after its whole run."""

from __future__ import annotations

import asyncio

import pytest

from evolving_rl.clients.policy import Generation, SamplingParams
from evolving_rl.config import parse_config
from evolving_rl.pipeline.rollout import run_training_rollout
from tests.fakes.context import fake_context, toy_rows
from tests.fakes.scripted import EXTRACTOR_MARKER, ScriptedPolicy
from tests.fakes.tokenizer import ByteChatTokenizer

TOK = ByteChatTokenizer()
# Three roles told apart by every sampled setting; eval_solver is the greedy evaluation one.
SAMPLING = {"solver": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "max_new_tokens": 200},
            "extractor": {"temperature": 0.9, "top_p": 0.95, "top_k": 30,
                          "max_new_tokens": 4000},
            "eval_solver": {"temperature": 0.0, "top_p": 1.0, "top_k": -1,
                            "max_new_tokens": 200}}


class RecordingPolicy(ScriptedPolicy):
    """The scripted policy, recording (extractor call?, sampling) of every generation."""

    def __init__(self) -> None:
        super().__init__(TOK)
        self.seen: list[tuple[bool, SamplingParams]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.seen.append((EXTRACTOR_MARKER in TOK.decode(prompt_ids), sampling))
        return await super().generate(prompt_ids, sampling)


def _settings(sampling: SamplingParams) -> tuple[float, float, int]:
    return sampling.temperature, sampling.top_p, sampling.top_k


@pytest.mark.parametrize("method", ["evolving", "grpo_baseline"])
def test_training_rollouts_use_the_training_sampling_settings(tmp_path, method):
    cfg = parse_config({"pipeline": {"method": method, "n_skills": 2, "top_k": 2,
                                     "n_repeats": 1, "max_steps": 2,
                                     "max_context_tokens": 16384},
                        "sampling": SAMPLING})
    policy = RecordingPolicy()
    ctx = fake_context(tmp_path, cfg, policy=policy)
    asyncio.run(run_training_rollout(ctx, toy_rows(2), rollout_id=1))
    solver = [s for extractor, s in policy.seen if not extractor]
    extractor = [s for extractor, s in policy.seen if extractor]
    assert solver and (extractor or method == "grpo_baseline")
    assert {_settings(s) for s in solver} == {(0.7, 0.8, 20)}
    assert all(s.max_new_tokens <= 200 for s in solver)
    assert {_settings(s) for s in extractor} <= {(0.9, 0.95, 30)}
