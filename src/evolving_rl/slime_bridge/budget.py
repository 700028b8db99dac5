"""The device-time budget of one slime launch on one GPU from a bare machine (issue 41 §2).

Owns the arithmetic: `Measured` numbers (each with where it was measured), `MEASURED` (the
one-GPU slime reports of 2026-12-03/04 and the local backend's learning-curve report of
2026-12-02), a `Plan` read from a profile (steps, source tasks and episodes a step, held-out
cases), `budget_lines` (one line per part of a launch, with its basis), `max_steps` (the most
steps that fit, keeping a reserve) and `python -m evolving_rl.slime_bridge.budget --config X`,
which prints the table for each method and exits 1 when a method does not fit.

Rollout seconds a step are the local backend's (no slime launch has played this profile's 72
episodes a step): the slowest of its 10-step runs of configs/local_gpu_qwen.yaml on one H200,
its training included and the GPU shared by six runs, scaled by the step's episodes. Train
seconds come from slime's own step on one H200 (all its stages: reference and old log-probs,
actor training), scaled by the step's tokens: samples a step x the measured mean tokens of a
sample (episodes that ran all 20 turns: none was won). Both err long.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from evolving_rl.config import Config, load_config

TRAINING = "docs/results/2026-12-04-slime-one-gpu-training.md"
LOCAL = "docs/results/2026-12-02-learning-curve-0.5b.md"
LIMIT_S = 1800.0
# What a profile keeps to spare for estimates this rough (`max_steps` in the printed table).
RESERVE_S = 120.0
METHODS = ("evolving", "grpo_baseline")


@dataclass(frozen=True)
class Measured:
    """One measured number and where it was measured."""

    value: float
    source: str


@dataclass(frozen=True)
class MeasuredInputs:
    """What the budget is made of; defaults in `MEASURED`."""

    carry_gb: Measured
    carry_gb_per_s: Measured
    setup_s: Measured
    conversion_s: Measured
    launch_to_first_rollout_s: Measured
    teardown_s: Measured
    polling_s: Measured
    # The local backend's seconds a step, and the solver episodes of that step.
    local_step_s: Measured
    local_step_episodes: Measured
    # slime's train seconds of one step, its samples and their mean tokens.
    slime_train_s: Measured
    slime_train_samples: Measured
    sample_tokens: Measured
    first_step_warmup_s: Measured
    weight_push_s: Measured
    checkpoint_s: Measured
    # Seconds an evaluation case (with and without skill) takes, and its basis.
    eval_case_s: Measured

    @property
    def train_tokens_per_s(self) -> float:
        return (self.slime_train_samples.value * self.sample_tokens.value
                / self.slime_train_s.value)


MEASURED = MeasuredInputs(
    carry_gb=Measured(2.7, "wheelhouse (numpy 1) + 31 env wheels + 0.5B model, issue 41"),
    carry_gb_per_s=Measured(2.6 / 259, f"{TRAINING}: 2.6 GB in 46 calls, 259 s"),
    setup_s=Measured(118.0, f"{TRAINING}: device time, setup"),
    conversion_s=Measured(56.0, f"{TRAINING}: HF -> torch_dist conversion"),
    launch_to_first_rollout_s=Measured(
        233.0, f"{TRAINING}: SGLang up 3 min 40 s after the launch, rollout 0 13 s later "
               "(train_excerpt.log 16:48:01 -> 16:48:14)"),
    teardown_s=Measured(16.0, f"{TRAINING}: job end 16:49:28 -> everything stopped 16:49:44"),
    polling_s=Measured(56.0, f"{TRAINING}: 1,274 s of device time less its parts"),
    local_step_s=Measured(48.6, f"{LOCAL}: slowest run's 10 steps 8.1 min, training "
                                "included, one H200 shared by six runs"),
    local_step_episodes=Measured(72.0, f"{LOCAL}: 8 x (1 + 4 x 2) solver episodes a step"),
    slime_train_s=Measured(6.03, f"{TRAINING} metrics.jsonl: perf/train_time, step 1"),
    slime_train_samples=Measured(12.0, f"{TRAINING}: 12 samples a step"),
    sample_tokens=Measured(2622.7, f"{TRAINING} metrics.jsonl: rollout/total_lengths, step 1 "
                                   "(20-turn episodes: none won)"),
    first_step_warmup_s=Measured(8.9, f"{TRAINING} metrics.jsonl: perf/train_time 14.9 s at "
                                      "step 0 against 6.0 s at step 1"),
    weight_push_s=Measured(0.1, f"{TRAINING}: update_weights 0.1 s"),
    checkpoint_s=Measured(20.7, f"{TRAINING} metrics.jsonl: perf/save_model_time (slime saves "
                                "the last rollout whatever SAVE_INTERVAL)"),
    eval_case_s=Measured(162.0 / 64, f"{LOCAL}: eval before <= 2.7 min for 16 games x 4 "
                                     "repeats (64 cases), one H200 shared"),
)


@dataclass(frozen=True)
class Plan:
    """What one launch runs: steps, and per step its solver episodes, extractions and trained
    samples; the cases of each held-out evaluation (before and after)."""

    method: str
    steps: int
    episodes: int
    extractions: int
    eval_cases: int

    @property
    def samples(self) -> int:
        return self.episodes + self.extractions


def plan_of(config: Config, method: str | None = None, steps: int | None = None,
            eval_cases: int | None = None) -> Plan:
    """The plan of a profile: `local.train_steps` steps (the launch's NUM_ROLLOUT), the
    pipeline's episode budget, `local.n_eval_games` x `local.eval_repeats` held-out cases."""
    pipe = config.pipeline
    method = method or pipe.method
    grid = pipe.n_skills * pipe.top_k * pipe.n_repeats
    tasks = pipe.source_tasks_per_rollout
    extractions = tasks * pipe.n_skills if method == "evolving" else 0
    return Plan(method=method, steps=config.local.train_steps if steps is None else steps,
                episodes=tasks * (1 + grid), extractions=extractions,
                eval_cases=(config.local.n_eval_games * config.local.eval_repeats
                            if eval_cases is None else eval_cases))


@dataclass(frozen=True)
class Line:
    """One part of a launch: its seconds and how they were reckoned."""

    part: str
    seconds: float
    basis: str


def rollout_s(inputs: MeasuredInputs, plan: Plan) -> float:
    return inputs.local_step_s.value * plan.episodes / inputs.local_step_episodes.value


def train_s(inputs: MeasuredInputs, plan: Plan) -> float:
    return plan.samples * inputs.sample_tokens.value / inputs.train_tokens_per_s


def step_s(inputs: MeasuredInputs, plan: Plan) -> float:
    return rollout_s(inputs, plan) + train_s(inputs, plan) + inputs.weight_push_s.value


def budget_lines(inputs: MeasuredInputs, plan: Plan) -> list[Line]:
    """Every part of one launch from a bare machine, in the order it runs."""
    m = inputs
    eval_s = plan.eval_cases * m.eval_case_s.value
    carry = m.carry_gb.value / m.carry_gb_per_s.value
    step_basis = (f"rollout {rollout_s(m, plan):.1f} s ({plan.episodes} episodes, "
                  f"{plan.extractions} extractions; {m.local_step_s.source}) + train "
                  f"{train_s(m, plan):.1f} s ({plan.samples} samples x "
                  f"{m.sample_tokens.value:.0f} tokens at {m.train_tokens_per_s:.0f} tokens/s; "
                  f"{m.slime_train_s.source}) + push {m.weight_push_s.value:g} s")
    return [
        Line(f"carry {m.carry_gb.value:g} GB of wheels and weights", carry,
             f"{m.carry_gb.source}; {m.carry_gb_per_s.source}"),
        Line("setup", m.setup_s.value, m.setup_s.source),
        Line("HF -> torch_dist conversion", m.conversion_s.value, m.conversion_s.source),
        Line("launch until the first rollout", m.launch_to_first_rollout_s.value,
             m.launch_to_first_rollout_s.source),
        Line(f"eval before ({plan.eval_cases} cases)", eval_s, m.eval_case_s.source),
        Line(f"{plan.steps} steps x (rollout + train + weight push)",
             plan.steps * step_s(m, plan), step_basis),
        Line("first step's warm-up", m.first_step_warmup_s.value, m.first_step_warmup_s.source),
        Line("final checkpoint", m.checkpoint_s.value, m.checkpoint_s.source),
        Line(f"eval after ({plan.eval_cases} cases)", eval_s, m.eval_case_s.source),
        Line("teardown", m.teardown_s.value, m.teardown_s.source),
        Line("polling between device calls", m.polling_s.value, m.polling_s.source),
    ]


def total_s(lines: list[Line]) -> float:
    return sum(line.seconds for line in lines)


def max_steps(inputs: MeasuredInputs, plan: Plan, limit_s: float = LIMIT_S,
              reserve_s: float = 0.0) -> int:
    """The most steps of `plan` that fit `limit_s` with `reserve_s` to spare (0 if none)."""
    fixed = total_s(budget_lines(inputs, Plan(plan.method, 0, plan.episodes, plan.extractions,
                                              plan.eval_cases)))
    room = limit_s - reserve_s - fixed
    return max(0, math.floor(room / step_s(inputs, plan)))


def render(inputs: MeasuredInputs, plans: list[Plan], limit_s: float = LIMIT_S,
           reserve_s: float = RESERVE_S) -> str:
    """A markdown table, one column per plan, then each line's basis."""
    tables = [budget_lines(inputs, plan) for plan in plans]
    head = "| part | " + " | ".join(plan.method for plan in plans) + " |"
    rows = [head, "|---|" + "---|" * len(plans)]
    for index, line in enumerate(tables[0]):
        cells = " | ".join(f"{round(lines[index].seconds):,} s" for lines in tables)
        rows.append(f"| {line.part} | {cells} |")
    totals = " | ".join(f"**{round(total_s(lines)):,} s**" for lines in tables)
    rows.append(f"| total (of {limit_s:,.0f} s) | {totals} |")
    fits = ", ".join(f"{plan.method} {max_steps(inputs, plan, limit_s, reserve_s)}"
                     for plan in plans)
    basis = [f"- {line.part}: {line.basis}" for line in tables[0]]
    fit = f"Most steps that fit {limit_s:,.0f} s with {reserve_s:,.0f} s to spare: {fits}."
    return "\n".join([*rows, "", fit, "", *basis])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evolving_rl.slime_bridge.budget",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the slime profile (YAML)")
    parser.add_argument("--steps", type=int, help="steps (default: local.train_steps)")
    parser.add_argument("--eval-cases", type=int,
                        help="cases of each evaluation (default: local.n_eval_games x "
                             "local.eval_repeats)")
    parser.add_argument("--limit-s", type=float, default=LIMIT_S)
    parser.add_argument("--reserve-s", type=float, default=RESERVE_S)
    args = parser.parse_args(argv)
    config = load_config(args.config)
    plans = [plan_of(config, method, args.steps, args.eval_cases) for method in METHODS]
    print(render(MEASURED, plans, args.limit_s, args.reserve_s))
    over = [plan.method for plan in plans
            if total_s(budget_lines(MEASURED, plan)) > args.limit_s]
    if over:
        print(f"over {args.limit_s:,.0f} s: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
