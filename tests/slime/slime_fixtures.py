"""Helpers and fixtures of the slime contract tests: slime stand-ins, slime args, a fake pipeline.

Where slime is not importable, `slime_types` provides minimal stand-ins mirroring, field for
field, the pinned commit's `Sample` (slime/utils/types.py) and `RolloutFnTrainOutput` /
`RolloutFnEvalOutput` (slime/rollout/base_types.py), and patches `slime_bridge.slime_api` to use
them. When slime IS importable (checked out, or found by `tests.upstream` and put on the path) the
real classes are used (tests marked `real_slime` need it).
`slime_file` reads slime's sources at the pin from `tests.upstream` (the `slime/` submodule when
checked out, else $EVOLVING_RL_SLIME_PATH, which .ci/run sets); without them a test skips, and
fails on CI.

slime's per-token log-probs and entropies are replaced in loss tests by stand-ins that follow
slime's rule for the entropy gradient: differentiable only when `args.entropy_coef` != 0
(slime/backends/megatron_utils/loss.py:551, else `mark_non_differentiable`,
slime/utils/ppo_utils.py:277-278). `launcher_args` is what slime's parser makes of a train
script (scripts/alfworld/train_alfworld.sh by default, or scripts/web/train_web.sh) with its
default config: its flag arrays and the config's flags (`config_tokens`); `launch_text` is a
script with the shared launch it sources (scripts/lib/slime_launch.sh).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
import sys
import types
from argparse import Namespace
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from evolving_rl.config import load_config
from evolving_rl.core.nucleus import Nucleus, NucleusBuilder
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import SampleStatus, TrainSample
from evolving_rl.slime_bridge import runtime, slime_api
from evolving_rl.slime_bridge.args import save_flags
from evolving_rl.slime_bridge.settings import HOOK_PATHS, HOOKS_MODULE, config_flags
from tests import upstream


def _slime_importable() -> bool:
    upstream.put_on_path(upstream.find_slime())
    try:  # the repo's slime/ gitlink folder is an empty namespace package when not checked out
        return importlib.util.find_spec("slime.utils.types") is not None
    except ModuleNotFoundError:
        return False


SLIME_IMPORTABLE = _slime_importable()
# On CI these run (and fail without slime) rather than skip.
real_slime = pytest.mark.skipif(not SLIME_IMPORTABLE and not os.environ.get("CI"),
                                reason="slime is not importable here")


def slime_file(path: str) -> str:
    """A file of slime at the pinned commit (skips without slime's sources; fails on CI)."""
    return (upstream.slime_dir() / path).read_text()


@dataclass
class StandInPrefixCacheInfo:
    """slime's `Sample.PrefixCacheInfo` at the pinned commit: its fields and `add`."""

    cached_tokens: int = 0
    total_prompt_tokens: int = 0

    def add(self, meta_info: dict) -> None:
        self.cached_tokens += meta_info.get("cached_tokens", 0)
        self.total_prompt_tokens += meta_info.get("prompt_tokens", 0)


@dataclass
class StandInSample:
    """Fields of slime's `Sample` at the pinned commit (names, order, defaults)."""

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: list[int] | None = None
    rollout_top_p_token_offsets: list[int] | None = None
    rollout_routed_experts: list[list[int]] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None
    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0
    spec_info: dict = field(default_factory=dict)  # slime: Sample.SpecInfo
    prefix_cache_info: StandInPrefixCacheInfo = field(default_factory=StandInPrefixCacheInfo)


@dataclass
class StandInTrainOutput:
    """slime.rollout.base_types.RolloutFnTrainOutput at the pinned commit."""

    samples: list[list[Any]]
    metrics: dict[str, Any] = None


@dataclass
class StandInEvalOutput:
    """slime.rollout.base_types.RolloutFnEvalOutput at the pinned commit."""

    data: dict[str, dict[str, Any]]
    metrics: dict[str, Any] = None


@dataclass
class SlimeTypes:
    """The `Sample` and output classes the hooks produce in this test session."""

    sample: type
    train_output: type
    eval_output: type


@pytest.fixture
def slime_types(monkeypatch) -> SlimeTypes:
    if SLIME_IMPORTABLE:
        from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput
        from slime.utils.types import Sample

        return SlimeTypes(Sample, RolloutFnTrainOutput, RolloutFnEvalOutput)
    monkeypatch.setattr(slime_api, "sample_class", lambda: StandInSample)
    monkeypatch.setattr(slime_api, "train_output",
                        lambda samples, metrics: StandInTrainOutput(samples, metrics))
    monkeypatch.setattr(slime_api, "eval_output",
                        lambda data, metrics: StandInEvalOutput(data, metrics))
    return SlimeTypes(StandInSample, StandInTrainOutput, StandInEvalOutput)


TEST_LOSS = {"clip_eps_low": 0.1, "clip_eps_high": 0.15,
             "kl_coef": {"solver": 0.01, "extractor": 0.2},
             "entropy_coef": {"solver": 0.0, "extractor": -0.03}}


@pytest.fixture
def config_path(tmp_path) -> Path:
    """Our config (reference values, distinct per-role KL) and slime's custom-config YAML."""
    ours = tmp_path / "evolving_rl.yaml"
    ours.write_text(yaml.safe_dump({"environment": "alfworld", "loss": TEST_LOSS,
                                    "pipeline": {"source_tasks_per_rollout": 2}}))
    custom = tmp_path / "slime_custom_config.yaml"
    custom.write_text(yaml.safe_dump({"evolving_rl_config": str(ours)}))
    return custom


@pytest.fixture
def slime_args(config_path) -> Namespace:
    """The slime args our hooks read, as slime's parser leaves them after `--custom-config-path`."""
    args = Namespace(
        **HOOK_PATHS, custom_config_path=str(config_path), loss_type="custom_loss",
        advantage_estimator="grpo", normalize_advantages=False, use_opd=False, kl_coef=0.0,
        kl_loss_type="low_var_kl", use_kl_loss=True, kl_loss_coef=0.01, entropy_coef=1.0,
        use_dynamic_batch_size=True, calculate_per_token_loss=True, n_samples_per_prompt=1,
        rollout_top_p=0.9,
        rollout_temperature=1.0, eps_clip=0.1, eps_clip_high=0.15, lr=1e-6, adam_beta1=0.9,
        adam_beta2=0.98, weight_decay=0.1, clip_grad=1.0, use_rollout_logprobs=False,
        rollout_batch_size=2, global_batch_size=2, seed=0, rollout_seed=0,
        sglang_router_ip="127.0.0.1",
        sglang_router_port=30000, hf_checkpoint="/models/Qwen2.5-7B-Instruct",
        eval_prompt_data=None, use_wandb=False, use_tensorboard=False)
    for key, value in yaml.safe_load(config_path.read_text()).items():
        setattr(args, key, value)  # what slime_validate_args does with --custom-config-path
    return args


def replayed_nucleus(response: list[int], mask: list[int]) -> Nucleus:
    """A top-p 0.9 nucleus: (id, id + 1) on sampled tokens, empty spans on observations."""
    builder = NucleusBuilder()
    for token, sampled in zip(response, mask, strict=True):
        if sampled:
            builder.add(Nucleus((token, token + 1), (0, 2)))
        else:
            builder.add_empty(1)
    return builder.build()


def solver_sample(group_id: str, reward: float, advantage: float, task_type: str,
                  status: SampleStatus = SampleStatus.COMPLETED) -> TrainSample:
    """A two-turn ALFWorld episode: action, observation block (masked), action."""
    prompt = [151644, 8948, 198, 2610, 525, 13]
    turn1, obs, turn2 = [27, 1311, 29, 733, 151645], [198, 26, 17, 13, 198], [27, 1311, 29, 2]
    lp1, lp2 = [-0.1, -0.5, -0.2, -1.2, -0.05], [-0.3, -0.4, -0.6, -0.9]
    response, mask = turn1 + obs + turn2, [1] * 5 + [0] * 5 + [1] * 4
    return TrainSample(
        role=Role.SOLVER, prompt_ids=prompt, response_ids=response,
        loss_mask=mask, log_probs=lp1 + [0.0] * 5 + lp2, reward=reward,
        group_id=group_id, status=status, advantage=advantage,
        metadata={"task_type": task_type, "task_id": f"train/{group_id}"},
        nucleus=replayed_nucleus(response, mask))


def extractor_sample(group_id: str, reward: float, advantage: float, *,
                     audit_passed: bool = True) -> TrainSample:
    """One extraction: a JSON skill, every token trainable."""
    return TrainSample(
        role=Role.EXTRACTOR, prompt_ids=[151644, 8948, 198, 5501], response_ids=[90, 1, 2, 3, 92],
        loss_mask=[1] * 5, log_probs=[-0.7, -0.2, -0.3, -0.1, -0.4], reward=reward,
        group_id=group_id, advantage=advantage,
        metadata={"task_type": "pick_clean_then_place_in_recep", "skill_parsed": audit_passed,
                  "audit_passed": audit_passed},
        nucleus=replayed_nucleus([90, 1, 2, 3, 92], [1] * 5))


def grpo(rewards: list[float], weight: float) -> list[float]:
    """Population-std GRPO advantage times the role weight (what the pipeline hands over)."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [0.0 if std == 0 else (r - mean) / (std + 1e-6) * weight for r in rewards]


def realistic_samples() -> list[TrainSample]:
    """One source task: an extractor group of 3 and two solver groups (one of zero variance)."""
    ext_rewards, solver_rewards = [0.5, 0.0, 1.0], [1.0, 0.0, 1.0]
    out = [extractor_sample("src0/extractor", r, a, audit_passed=r > 0)
           for r, a in zip(ext_rewards, grpo(ext_rewards, 0.2), strict=True)]
    out += [solver_sample("src0/task7/solver", r, a, "pick_heat_then_place_in_recep")
            for r, a in zip(solver_rewards, grpo(solver_rewards, 1.0), strict=True)]
    out += [solver_sample("src0/task9/solver", 0.0, 0.0, "pick_cool_then_place_in_recep",
                          SampleStatus.TRUNCATED) for _ in range(2)]
    return out


STUDENT_TEACHER = ([-0.4, -0.2, -0.9, -1.0, -0.3], [-0.1, -0.7, -12.5, 0.0])  # per action turn


def student_sample(group_id: str, reward: float, advantage: float, task_type: str,
                   shift: float = 0.0) -> TrainSample:
    """A no-skill student episode (`pipeline.skill_use: teacher`): a solver episode with its
    teacher's log-prob on every trained token (shifted by `shift`, kept <= 0), 0.0 elsewhere."""
    turn1, turn2 = ([min(v + shift, 0.0) for v in turn] for turn in STUDENT_TEACHER)
    sample = solver_sample(group_id, reward, advantage, task_type)
    return dataclasses.replace(sample, teacher_log_probs=turn1 + [0.0] * 5 + turn2,
                               metadata={**sample.metadata, "student": True})


def teacher_samples() -> list[TrainSample]:
    """`realistic_samples` under the teacher switch: the first solver group also holds two
    students, GRPO over all five."""
    rewards = [1.0, 0.0, 1.0, 0.0, 1.0]
    advantages = grpo(rewards, 1.0)
    task = "pick_heat_then_place_in_recep"
    out = [s for s in realistic_samples() if s.group_id != "src0/task7/solver"]
    out[3:3] = [solver_sample("src0/task7/solver", r, a, task)
                for r, a in zip(rewards[:3], advantages[:3], strict=True)]
    out[6:6] = [student_sample("src0/task7/solver", r, a, task, shift=-0.2 * i)
                for i, (r, a) in enumerate(zip(rewards[3:], advantages[3:], strict=True))]
    return out


@dataclass
class FakeOutcome:
    """Shape of evolving_rl.pipeline.rollout.RolloutOutcome."""

    samples: list[TrainSample]
    metrics: dict[str, float]


@pytest.fixture
def fake_pipeline(monkeypatch) -> dict[str, Any]:
    """Fake pipeline entry points; records what the hooks pass them."""
    calls: dict[str, Any] = {"rows": [], "eval_rows": [], "rollout_ids": []}

    async def build_context(config, *, policy_url, tokenizer_path, top_p_replay):
        calls["context"] = {"config": config, "policy_url": policy_url,
                            "top_p_replay": top_p_replay,
                            "tokenizer_path": tokenizer_path}
        return calls["context"]

    async def run_training_rollout(ctx, rows, *, rollout_id=None):
        calls["rows"].append(rows)
        calls["rollout_ids"].append(rollout_id)
        return FakeOutcome(realistic_samples(), {"wall_s": 12.5, "removed/env_error": 1.0})

    async def run_eval(ctx, rows):
        calls["eval_rows"].append(rows)
        return {"eval/success_with_skill": 0.75, "eval/success_without_skill": 0.5}

    for name, attrs in (("context", {"build_context": build_context}),
                        ("rollout", {"run_training_rollout": run_training_rollout}),
                        ("evaluation", {"run_eval": run_eval})):
        module = types.ModuleType(f"evolving_rl.pipeline.{name}")
        for attr, value in attrs.items():
            setattr(module, attr, value)
        monkeypatch.setitem(sys.modules, f"evolving_rl.pipeline.{name}", module)
    monkeypatch.setattr(runtime, "RUNTIMES", {})
    return calls


class FakeDataSource:
    """slime's RolloutDataSource view of our prompt JSONL (n_samples_per_prompt = 1)."""

    def __init__(self, sample_cls: type, n_per_prompt: int = 1) -> None:
        self.sample_cls, self.n_per_prompt, self.next_index = sample_cls, n_per_prompt, 0

    def get_samples(self, num_samples: int) -> list[list[Any]]:
        groups = []
        for _ in range(num_samples):
            i = self.next_index
            meta = {"split": "train", "task_type": "pick_and_place_simple",
                    "game": f"json_2.1.1/train/t{i}/game.tw-pddl", "environment": "alfworld"}
            groups.append([self.sample_cls(group_index=i, index=i, prompt=f"put a mug in cab {i}",
                                           label=f"train/t{i}/trial", metadata=dict(meta))
                           for _ in range(self.n_per_prompt)])
            self.next_index += 1
        return groups


def slime_batch(train_data: dict[str, Any], policy_log_probs: list[torch.Tensor],
                ref_log_probs: list[torch.Tensor]) -> dict[str, Any]:
    """One micro-batch as slime's forward_step hands it to the loss (cp=1, all samples)."""
    tokens = [torch.tensor(t, dtype=torch.long) for t in train_data["tokens"]]
    rewards = train_data["rewards"]
    return {
        "tokens": torch.cat(tokens).unsqueeze(0),
        "unconcat_tokens": tokens,
        "multimodal_train_inputs": None,
        "packed_seq_params": None,
        "total_lengths": [len(t) for t in train_data["tokens"]],
        "response_lengths": list(train_data["response_lengths"]),
        "loss_masks": [torch.tensor(m, dtype=torch.int) for m in train_data["loss_masks"]],
        "log_probs": [lp.detach().clone() for lp in policy_log_probs],
        "ref_log_probs": ref_log_probs,
        "values": None,
        "advantages": [torch.ones_like(lp) * r for lp, r in zip(policy_log_probs, rewards,
                                                                 strict=True)],
        "returns": [torch.ones_like(lp) * r for lp, r in zip(policy_log_probs, rewards,
                                                              strict=True)],
        "rollout_log_probs": [torch.tensor(x, dtype=torch.float32)
                              for x in train_data["rollout_log_probs"]],
        "teacher_log_probs": [torch.tensor(x, dtype=torch.float32)
                              for x in train_data["teacher_log_probs"]],
        "rollout_mask_sums": torch.tensor(train_data["rollout_mask_sums"], dtype=torch.float32),
    }


def sum_of_token_reducer(batch: dict[str, Any]):
    """slime's cp=1 reducer under --calculate-per-token-loss: masked sum over tokens."""
    lengths, masks = batch["response_lengths"], batch["loss_masks"]

    def reduce(x: torch.Tensor) -> torch.Tensor:
        return sum((part * mask).sum() for part, mask in zip(x.split(lengths), masks, strict=True))

    return reduce


def entropy_keeps_grad(args: Namespace) -> bool:
    """slime's rule (loss.py:551): the entropy is differentiable only when `entropy_coef` != 0."""
    return getattr(args, "entropy_coef", 0.0) != 0


def given_log_probs_and_entropy(log_probs: list[torch.Tensor], entropies: list[torch.Tensor]):
    """A stand-in for `slime_api.log_probs_and_entropy` returning the given per-sample tensors,
    the entropies detached exactly when slime's rule says so."""

    def log_probs_and_entropy(args, batch, logits):
        keep = entropy_keeps_grad(args)
        return log_probs, [e if keep else e.detach() for e in entropies]

    return log_probs_and_entropy


def logits_log_probs_and_entropy(args: Namespace, batch: dict[str, Any], logits: torch.Tensor):
    """A stand-in for `slime_api.log_probs_and_entropy` computing from [1, T, V] logits as slime's
    `get_log_probs_and_entropy` does at tp = cp = 1 (slime/backends/megatron_utils/loss.py:513-600):
    logits over the rollout temperature, each position's log-prob of the next token and the
    entropy of its full softmax, per-sample response slices [end - response - 1, end - 1)
    (loss.py:499-508), the entropy differentiable by slime's rule."""
    scaled = logits.squeeze(0).float() / getattr(args, "rollout_temperature", 1.0)
    log_softmax = torch.log_softmax(scaled, dim=-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1)
    if not entropy_keeps_grad(args):
        entropy = entropy.detach()
    targets = torch.roll(torch.cat(batch["unconcat_tokens"]), -1)
    log_prob = log_softmax.gather(-1, targets[:, None]).squeeze(-1)
    log_probs, entropies, end = [], [], 0
    for total, response in zip(batch["total_lengths"], batch["response_lengths"], strict=True):
        end += total
        log_probs.append(log_prob[end - response - 1:end - 1])
        entropies.append(entropy[end - response - 1:end - 1])
    return log_probs, entropies


ROOT = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = ROOT / "scripts/alfworld/train_alfworld.sh"
WEB_TRAIN_SCRIPT = ROOT / "scripts/web/train_web.sh"
TRAIN_SCRIPTS = (TRAIN_SCRIPT, WEB_TRAIN_SCRIPT)
LAUNCH_LIB = ROOT / "scripts/lib/slime_launch.sh"
FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
# slime's parser defaults at the pin (slime/utils/arguments.py) of the flags that our checks,
# slime's derivations and docs/fidelity.md read, for those the scripts omit; test_train_script
# checks them there.
SLIME_DEFAULTS = {
    "normalize_advantages": False, "use_opd": False, "kl_coef": 0.0, "use_kl_loss": False,
    "calculate_per_token_loss": False, "entropy_coef": 0.0, "use_dynamic_batch_size": False,
    "global_batch_size": None, "num_steps_per_rollout": None, "eval_function_path": None,
    "skip_eval_before_train": False,
}


def launch_text(script: Path) -> str:
    """The shared launch, then the script: what runs, with the script's own defaults last (they
    are set before the launch is sourced, which keeps them)."""
    text = script.read_text()
    if 'source "$ROOT/scripts/lib/slime_launch.sh"' in text:
        text = LAUNCH_LIB.read_text() + "\n" + text
    return text


def default_config(script: Path) -> Path:
    """The config a train script uses when $CONFIG is not set."""
    match = re.search(r'\$\{CONFIG:-\$ROOT/([^}]+)\}', script.read_text())
    assert match is not None, f"{script.name} names no default CONFIG"
    return ROOT / match.group(1)


def script_arrays(text: str) -> dict[str, list[str]]:
    """A launch script's `NAME_ARGS=( ... )` arrays as token lists (quotes stripped)."""
    arrays = {}
    for name, body in re.findall(r"^(\w+_ARGS)=\((.*?)\)\s*$", text, flags=re.S | re.M):
        body = "\n".join(line.split(" #")[0] for line in body.splitlines())
        arrays[name] = [token.strip('"') for token in body.split()]
    return arrays


def script_defaults(text: str) -> dict[str, str]:
    """The script's `NAME="${NAME:-default}"` overridable defaults."""
    return dict(re.findall(r'^(\w+)="\$\{\1:-([^}]*)\}"', text, flags=re.M))


def config_tokens(config: Path, values: dict[str, str]) -> list[str]:
    """What `python -m evolving_rl.slime_bridge.args` prints for `config` in the launch, with the
    script's save interval and no extra flags (tests/slime/test_slime_args.py runs the module)."""
    flags = config_flags(load_config(config))
    return [token for flag in flags for token in flag.argv()] + \
        save_flags("$SAVE_DIR", values["SAVE_INTERVAL"], [])


def _set_flags(args: Namespace, tokens: list[str], values: dict[str, str]) -> None:
    """argparse's reading of one array: a flag followed by a flag (or nothing) is a switch."""
    for i, token in enumerate(tokens):
        if not FLAG.fullmatch(token):
            continue
        value = tokens[i + 1] if i + 1 < len(tokens) else None
        key = token[2:].replace("-", "_")
        if value is None or FLAG.fullmatch(value):
            setattr(args, key, True)
            continue
        value = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), value)
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                continue
        setattr(args, key, value)


def _slime_derivations(args: Namespace) -> Namespace:
    """What `slime_validate_args` derives that we rely on (slime/utils/arguments.py:1968-1979)."""
    if args.eval_function_path is None:
        args.eval_function_path = args.rollout_function_path
    if args.num_steps_per_rollout is not None:
        derived = args.rollout_batch_size * args.n_samples_per_prompt // args.num_steps_per_rollout
        assert args.global_batch_size in (None, derived), "slime asserts that they agree"
        args.global_batch_size = derived
    return args


def launcher_args(script: Path = TRAIN_SCRIPT, config: Path | None = None) -> Namespace:
    """slime's args from `script` run with `config` (default: the script's own) and its defaults."""
    text = launch_text(script)
    config = config or default_config(script)
    values = {**script_defaults(text), "HOOKS": HOOKS_MODULE}
    args = Namespace(**SLIME_DEFAULTS)
    for tokens in [*script_arrays(text).values(), config_tokens(config, values)]:
        _set_flags(args, tokens, values)
    return _slime_derivations(args)
