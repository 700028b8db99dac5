"""Our hooks' signatures, our stand-ins and the slime facts our design rests on, checked against
slime at the pinned commit (its sources found by `tests.upstream`; skipped without them, failed on
CI).

Record of slime's own plugin contract tests (tests/plugin_contracts at 624b824a) pointed at our
hooks (tests/slime_upstream/test_plugin_contracts.py runs them with these failures named), run
2026-11-30 with the command in the `evolving_rl.slime_hooks` docstring (all six hook
variables, `SLIME_CONTRACT_EVAL_FUNCTION_PATH` included), from `git archive` of the pin in
/tmp/slime_pin, Python 3.11.7 with this project's venv plus `pylatexenc` 2.11 (slime's rm_hub
imports it; the contract tests stub ray, sglang_router and transformers themselves):
31 passed, 5 failed of 36 (32 / 4 without the eval-function variable, whose probe then checks
slime's default). Every signature and call-site check passes (the parameter tuples asserted below
are theirs), and so does the eval logger. The five failures are synthetic assumptions of the
probes, not defects of the hooks:

- test_plugin_rollout_contracts.py::test_rollout_function_path_contract_supports_user_override
  and test_plugin_path_loading_contracts.py::test_path_loading_path_aligns_with_expected_format
  [eval_function] call the rollout function with `args=None` (test_plugin_rollout_contracts.py:142,
  test_plugin_path_loading_contracts.py:186): ours raises `ConfigError` because our config
  travels on slime's args (`--custom-config-path`), and it needs live servers. The train probe
  would then also want groups of exactly `n_samples_per_prompt` = 2 samples (:111); our groups
  are explicit and vary in size.
- test_plugin_runtime_hook_contracts.py::test_runtime_hook_path_aligns_with_expected_format
  [custom_rollout_log] and [custom_reward_post_process] hand the hooks bare `Sample`s without
  our tag (:100, :114): ours raise `ForeignSampleError` rather than log or train samples with
  made-up roles and advantages. [custom_convert_samples_to_train_data] (:119) gives the same
  untagged samples with an empty `Args`; it stops first at the missing `global_batch_size`
  (`AttributeError`), which slime derives (slime/utils/arguments.py:1971-1979) and
  `check_slime_args` requires.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re

import pytest
from slime_fixtures import (
    StandInEvalOutput,
    StandInPrefixCacheInfo,
    StandInSample,
    StandInTrainOutput,
    real_slime,
    slime_file,
)

from evolving_rl import slime_hooks
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import PrefixCacheCounts, TrainSample
from evolving_rl.slime_bridge.samples import to_slime_sample
from evolving_rl.slime_bridge.settings import HOOK_PATHS, HOOKS_MODULE
from evolving_rl.slime_bridge.train_data import ROLE_CHANNEL_KEY
from tests import upstream

# Parameter tuples of slime's call sites (tests/plugin_contracts at the pinned commit).
EXPECTED_PARAMS = {
    "generate_rollout": ("args", "rollout_id", "data_source", "evaluation"),
    "post_process_rewards": ("args", "samples"),
    "convert_samples_to_train_data": ("args", "samples"),
    "log_rollout": ("rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time"),
    "log_eval_rollout": ("rollout_id", "args", "data", "extra_metrics"),
    "policy_loss": ("args", "batch", "logits", "sum_of_sample_mean"),
}
CALL_SITES = {
    "slime/rollout/base_types.py": "output = fn(*args, **kwargs, evaluation=evaluation)",
    "slime/ray/rollout.py": "self.custom_convert_samples_to_train_data_func(self.args, samples)",
    "slime/observability/rollout_metrics.py":
        "custom_log_func(rollout_id, args, samples, rollout_extra_metrics, rollout_time)",
    "slime/backends/megatron_utils/loss.py":
        "loss, log = func(args, batch, logits, sum_of_sample_mean)",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMS))
def test_hook_parameters_match_slime_call_sites(name):
    params = inspect.signature(getattr(slime_hooks, name)).parameters
    assert tuple(params) == EXPECTED_PARAMS[name]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params.values())


def test_rollout_signature_matches_slime_default_exactly():
    source = slime_file("slime/rollout/sglang_rollout.py")
    default = next(node for node in ast.parse(source).body
                   if isinstance(node, ast.FunctionDef) and node.name == "generate_rollout")
    names = tuple(arg.arg for arg in default.args.args)
    defaults = tuple(ast.literal_eval(d) for d in default.args.defaults)
    ours = inspect.signature(slime_hooks.generate_rollout).parameters
    assert names == tuple(ours) == EXPECTED_PARAMS["generate_rollout"]
    assert defaults == tuple(p.default for p in ours.values() if p.default is not p.empty)


@pytest.mark.parametrize("path", sorted(CALL_SITES))
def test_slime_call_sites_are_as_we_assume(path):
    assert CALL_SITES[path] in slime_file(path)


def test_hook_paths_name_our_functions():
    for path in HOOK_PATHS.values():
        module, name = path.rsplit(".", 1)
        assert module == HOOKS_MODULE and callable(getattr(slime_hooks, name))


def _definition(source: str, name: str) -> ast.ClassDef | ast.FunctionDef:
    """The class or function `name` defined in `source` (nested definitions included)."""
    return next(node for node in ast.walk(ast.parse(source))
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name)


def _dataclass_fields(source: str, class_name: str) -> list[str]:
    cls = _definition(source, class_name)
    assert isinstance(cls, ast.ClassDef), class_name
    return [stmt.target.id for stmt in cls.body
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)]


def test_standins_mirror_pinned_slime_fields():
    types_src = slime_file("slime/utils/types.py")
    assert [f.name for f in dataclasses.fields(StandInSample)] == \
        _dataclass_fields(types_src, "Sample")
    assert {s.name: s.value for s in StandInSample.Status} == {
        "PENDING": "pending", "COMPLETED": "completed", "TRUNCATED": "truncated",
        "ABORTED": "aborted", "FAILED": "failed"}
    base_src = slime_file("slime/rollout/base_types.py")
    for standin, name in ((StandInTrainOutput, "RolloutFnTrainOutput"),
                          (StandInEvalOutput, "RolloutFnEvalOutput")):
        assert [f.name for f in dataclasses.fields(standin)] == _dataclass_fields(base_src, name)


def _upstream_definition(path: str, name: str, namespace: dict) -> object:
    """Class or function `name` of slime's `path` at the pin, run from its source in `namespace`."""
    node = _definition(slime_file(path), name)
    exec(compile(ast.Module([node], []), path, "exec"), namespace)
    return namespace[name]


def test_sglangs_prefix_cache_counts_reach_slimes_hit_rate():
    """Our sample's summed SGLang counts go through slime's own `PrefixCacheInfo.add` into its
    `_compute_prefix_cache_metrics` (both run from slime's source; they read 0 before)."""
    info = _upstream_definition("slime/utils/types.py", "PrefixCacheInfo",
                                {"dataclass": dataclasses.dataclass})
    assert [f.name for f in dataclasses.fields(info)] == \
        [f.name for f in dataclasses.fields(StandInPrefixCacheInfo)]

    @dataclasses.dataclass
    class Sample(StandInSample):
        prefix_cache_info: object = dataclasses.field(default_factory=info)

    hit_rate = _upstream_definition("slime/observability/rollout_metrics.py",
                                    "_compute_prefix_cache_metrics", {"Sample": Sample})
    samples = [to_slime_sample(TrainSample(
        role=Role.SOLVER, prompt_ids=[1, 2], response_ids=[3, 4], loss_mask=[1, 1],
        log_probs=[-0.5, -0.5], reward=0.0, group_id="g", prefix_cache=cache),
        Sample, index=i, group_index=0)
        for i, cache in enumerate([PrefixCacheCounts(120, 90), PrefixCacheCounts(80, 10)])]
    assert (samples[0].prefix_cache_info.total_prompt_tokens,
            samples[0].prefix_cache_info.cached_tokens) == (120, 90)
    assert hit_rate(None, samples) == {"prefix_cache_hit_rate": 0.5,
                                       "avg_cached_tokens_per_sample": 50.0}


def _string_list_after(source: str, marker: str) -> set[str]:
    """String constants of the first list literal starting with "tokens" after `marker`."""
    match = re.compile(r'\[\s*"tokens",').search(source, source.index(marker))
    list_start = match.start()
    depth, i = 0, list_start
    while True:
        depth += {"[": 1, "]": -1}.get(source[i], 0)
        if depth == 0:
            break
        i += 1
    node = ast.parse(source[list_start:i + 1].replace("*(", "(")).body[0].value
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def test_role_channel_survives_slime_data_path_to_the_loss():
    """teacher_log_probs is forwarded per DP rank, tensorised as float32, CP-sliced and moved to
    the device by the actor, requested for the loss batch, and read elsewhere only under OPD."""
    rollout_src = slime_file("slime/ray/rollout.py")
    assert ROLE_CHANNEL_KEY in _string_list_after(rollout_src, "def _split_train_data_by_dp")
    model_src = slime_file("slime/backends/megatron_utils/model.py")
    assert ROLE_CHANNEL_KEY in _string_list_after(model_src, "def forward_step")
    assert f'"{ROLE_CHANNEL_KEY}": torch.float32' in slime_file(
        "slime/observability/rollout_data_utils.py")
    actor_src = slime_file("slime/backends/megatron_utils/actor.py")
    assert f'for key in ["rollout_log_probs", "{ROLE_CHANNEL_KEY}"]' in actor_src
    loss_src = slime_file("slime/backends/megatron_utils/loss.py")
    assert "if args.use_opd:\n        apply_opd_kl_to_advantages(" in loss_src
    for key in ("kl_coef", "train_metadata", "metadata"):
        assert key not in _string_list_after(model_src, "def forward_step")


# Lines of slime at the pin that our settings, hooks and test stand-ins cite (file:line -> text).
CITED_LINES = {
    "slime/backends/megatron_utils/loss.py": {
        551: 'with_entropy_grad = with_entropy and getattr(args, "entropy_coef", 0.0) != 0',
        1114: "loss = pg_loss - args.entropy_coef * entropy_loss",
        1335: "func = load_function(args.custom_loss_function_path)",
        505: "log_probs_list.append(log_prob_full[start - 1 : end - 1])",
        507: "entropy_list.append(entropy_full[start - 1 : end - 1])",
    },
    "slime/utils/ppo_utils.py": {277: "if not with_entropy_grad:",
                                 278: "ctx.mark_non_differentiable(entropy)"},
    "slime/utils/dp_schedule.py": {
        135: "num_steps = len(rollout_ids) // global_batch_size",
        169: "if target_K != len(step_mbs):",
        170: "if args.use_dynamic_batch_size:",
        179: 'f"static path: num_mbs ({len(step_mbs)}) is not a multiple of "',
    },
    "slime/utils/arguments.py": {
        1968: "if args.eval_function_path is None:",
        1969: "args.eval_function_path = args.rollout_function_path",
        1972: "global_batch_size = args.rollout_batch_size * args.n_samples_per_prompt "
              "// args.num_steps_per_rollout",
        1979: "args.global_batch_size = global_batch_size",
    },
    "slime/backends/megatron_utils/model.py": {
        203: "args.train_iters = args.num_rollout * args.rollout_batch_size "
             "* args.n_samples_per_prompt // args.global_batch_size",
    },
    "slime/observability/metric_utils.py": {
        122: "return rollout_id * args.rollout_batch_size * args.n_samples_per_prompt "
             "// args.global_batch_size",
    },
    "slime/observability/logging_utils.py": {46: "if args.use_wandb:",
                                             49: "if args.use_tensorboard:"},
}


@pytest.mark.parametrize("path", sorted(CITED_LINES))
def test_cited_slime_lines_say_what_we_rely_on(path):
    lines = slime_file(path).splitlines()
    for number, text in CITED_LINES[path].items():
        assert lines[number - 1].strip() == text, f"{path}:{number}"


def test_slime_reads_entropy_coef_only_for_the_gradient_switch_and_its_own_loss():
    """With --loss-type custom_loss (slime/backends/megatron_utils/loss.py:1335) the value of
    --entropy-coef cannot double-apply an entropy term: slime's only other use is its own
    policy loss (loss.py:1114, `policy_loss_function`, which the custom loss replaces)."""
    source = slime_file("slime/backends/megatron_utils/loss.py")  # skips without slime
    root = upstream.slime_dir()
    hits = sorted((path.relative_to(root), number) for path in root.rglob("*.py")
                  if path.relative_to(root).parts[0] != "tests"
                  for number, line in enumerate(path.read_text().splitlines(), start=1)
                  if "entropy_coef" in line)
    places = [f"{path}:{number}" for path, number in hits]
    assert places == ["slime/backends/megatron_utils/loss.py:551",
                      "slime/backends/megatron_utils/loss.py:1114"]
    owner = next(node.name for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.FunctionDef) and node.lineno <= 1114 <= node.end_lineno)
    assert owner == "policy_loss_function"


@real_slime
def test_rollout_signature_equals_real_slime_default():
    from slime.rollout.sglang_rollout import generate_rollout as default

    ours = inspect.signature(slime_hooks.generate_rollout).parameters
    theirs = inspect.signature(default).parameters
    assert tuple(ours) == tuple(theirs)
    assert all(ours[n].kind == theirs[n].kind and ours[n].default == theirs[n].default
               for n in theirs)


@real_slime
def test_real_slime_sample_round_trip():
    from slime.utils.types import Sample
    from slime_fixtures import realistic_samples

    from evolving_rl.slime_bridge.samples import to_slime_groups

    groups = to_slime_groups(realistic_samples(), Sample)
    sample = Sample.from_dict(groups[0][0].to_dict())
    assert sample.metadata == groups[0][0].metadata and sample.loss_mask == groups[0][0].loss_mask


def test_pipeline_entry_points_accept_how_the_hooks_call_them():
    context = pytest.importorskip("evolving_rl.pipeline.context")
    rollout = pytest.importorskip("evolving_rl.pipeline.rollout")
    evaluation = pytest.importorskip("evolving_rl.pipeline.evaluation")
    inspect.signature(context.build_context).bind(
        object(), policy_url="http://127.0.0.1:1", tokenizer_path="/model")
    inspect.signature(rollout.run_training_rollout).bind(object(), [], rollout_id=3)
    inspect.signature(evaluation.run_eval).bind(object(), [])
    assert [f.name for f in dataclasses.fields(rollout.RolloutOutcome)] == ["samples", "metrics"]
