"""The device-time budget of one slime launch on one GPU from a bare machine (issue 41 §2).

Owns the arithmetic: `Measured` numbers (each with where it was measured), `MEASURED` (the
learn profile's two launches on one H100, 2026-12-07), a `Plan` of one launch
(steps and slime's evaluation interval from the recipe's profile, per step the solver episodes,
extractions and trained samples of the config's pipeline, the held-out cases), `budget_lines`
(one line per part of a launch, with its basis), `max_steps` (the most steps that fit, keeping a
reserve) and `python -m evolving_rl.slime_bridge.budget --config X`, which prints the table for
each method and exits 1 when a method does not fit.

Every part but the failed start was measured on the two launches of the learn profile at
e3250e5, seed 1, back to back on one H100 (ARMS, 2026-12-07): `evolving` first on a bare
machine (693 s from its start to its exit), `grpo_baseline` second (424 s, its launch and first
evaluation warmer than a bare machine's). The parts before the first step (launch, the cold
first evaluation), the first step's warm-up and the teardown are `evolving`'s, for both
methods (GRPO's step 1 trained only 3.6 s longer than its later ones); each method's step is
its own (the slowest rollout and the slowest train of steps 2-8, from ARMS_STEPS). The earlier
basis (the `grpo_baseline` launch of 2026-12-05 at 1febe90 and the `evolving` step of
2026-12-06) budgeted a GRPO launch at 786 s where 424 s was measured. A plan of other sizes
scales its method's measured step by its samples. The budget has no checkpoint line: it
budgets launches that save nothing (SAVE_INTERVAL=0, `slime_bridge.args`), and refuses a
profile that saves.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from evolving_rl.config import Config, load_config
from evolving_rl.slime_bridge.recipe import PROFILES, ROOT, Profile

LEARNS = "docs/results/2026-12-05-slime-learns-one-gpu.md"
ARMS = "docs/results/2026-12-07-slime-learn-arms.md"
ARMS_STEPS = "docs/results/2026-12-07-slime-learn-arms/learning_report.md"
LIMIT_S = 1800.0
# What a profile keeps to spare for the estimated evolving step (`max_steps` in the table).
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

    failed_start_s: Measured
    carry_gb: Measured
    carry_s: Measured
    setup_s: Measured
    launch_to_first_eval_s: Measured
    # The first evaluation's seconds beyond a later one's, and seconds a case of a later one.
    first_eval_extra_s: Measured
    eval_case_s: Measured
    # A measured step per method: its rollout, its training and their samples.
    rollout_s: Measured
    train_s: Measured
    step_samples: Measured
    evolving_rollout_s: Measured
    evolving_train_s: Measured
    evolving_step_samples: Measured
    first_step_warmup_s: Measured
    weight_push_s: Measured
    teardown_s: Measured
    polling_s: Measured


MEASURED = MeasuredInputs(
    failed_start_s=Measured(90.0, f"{LEARNS}: three failed machine starts cost 91 + 90 + 90 s "
                                  "before the run; room for one"),
    carry_gb=Measured(3.3, "slime wheelhouse 2.0 GB, HF model 1.2 GB, env wheels 141 MiB, "
                           "uv 17 MB, slime + Megatron sources 14 MB, data 7 MB"),
    carry_s=Measured(211.0, f"{ARMS}: 58 calls of 58 MiB, back to back"),
    setup_s=Measured(52.0, f"{ARMS}: untar, uv install of both wheelhouses"),
    launch_to_first_eval_s=Measured(
        291.0, f"{ARMS}: evolving, a bare machine's first launch: 57 s to the Ray job, 234 s "
               "to SGLang ready (Megatron actor and reference from the HF folder, SGLang's "
               "CUDA-graph capture)"),
    first_eval_extra_s=Measured(147.0 - 24.0, f"{ARMS}: the machine's first evaluation took "
                                              "147 s, the second launch's first 24 s"),
    eval_case_s=Measured(24.0 / 48, f"{ARMS}: 24 s for 48 games (no-skill episode, "
                                    "extraction, with-skill episode)"),
    rollout_s=Measured(8.292, f"{ARMS_STEPS}: grpo_baseline's slowest rollout of 8 steps "
                              "(4.5-8.3 s)"),
    train_s=Measured(9.448, f"{ARMS_STEPS}: grpo_baseline's slowest train of steps 2-8 "
                            "(6.0-9.4 s)"),
    step_samples=Measured(72.0, f"{ARMS}: grpo_baseline's 72 solver episodes a step"),
    evolving_rollout_s=Measured(12.67, f"{ARMS_STEPS}: evolving's slowest rollout of 8 steps "
                                       "(8.5-12.7 s)"),
    evolving_train_s=Measured(12.51, f"{ARMS_STEPS}: evolving's slowest train of steps 2-8 "
                                     "(9.6-12.5 s)"),
    evolving_step_samples=Measured(104.0, f"{ARMS}: 72 solver episodes and 32 extractions "
                                          "a step"),
    first_step_warmup_s=Measured(25.07 - 12.51, f"{ARMS_STEPS}: evolving's step 1 trained in "
                                                "25.1 s against 12.5 s at most later"),
    weight_push_s=Measured(0.16, f"{ARMS_STEPS}: update_weights 0.11-0.16 s"),
    teardown_s=Measured(39.0 - 24.0, f"{ARMS}: the last evaluation and the exit took 39 s, "
                                     "an evaluation 24 s"),
    polling_s=Measured(0.0, f"{ARMS}: none beyond the held time, with device calls back to "
                            "back (a pause over 30 s gives the machine back)"),
)


@dataclass(frozen=True)
class Plan:
    """What one launch runs: steps and slime's evaluation interval; per step its solver
    episodes, extractions and trained samples; the cases of each held-out evaluation."""

    method: str
    steps: int
    eval_interval: int
    episodes: int
    extractions: int
    eval_cases: int

    @property
    def samples(self) -> int:
        return self.episodes + self.extractions

    @property
    def evals_after(self) -> int:
        """slime evaluates before training and after every `eval_interval`-th step
        (slime/train.py:47-48 and 93-94, slime/utils/misc.py:127-128)."""
        return self.steps // self.eval_interval


def recipe_profile(config_path: str | Path) -> Profile:
    """The recipe's profile that launches `config_path`; it must save nothing (module doc)."""
    wanted = Path(config_path).resolve()
    found = [p for p in PROFILES.values() if (ROOT / p.config).resolve() == wanted]
    if not found:
        raise ValueError(f"no recipe profile launches {config_path}")
    if found[0].env.get("SAVE_INTERVAL") != "0":
        raise ValueError(f"profile {found[0].name} saves checkpoints: not budgeted here")
    return found[0]


def plan_of(config: Config, profile: Profile, method: str | None = None,
            steps: int | None = None, eval_cases: int | None = None) -> Plan:
    """The plan of a launch: the profile's NUM_ROLLOUT steps and EVAL_INTERVAL, the config
    pipeline's episode budget, `local.n_eval_games` x `local.eval_repeats` held-out cases."""
    pipe = config.pipeline
    method = method or pipe.method
    tasks = pipe.source_tasks_per_rollout
    extractions = tasks * pipe.n_skills if method == "evolving" else 0
    return Plan(method=method,
                steps=int(profile.env["NUM_ROLLOUT"]) if steps is None else steps,
                eval_interval=int(profile.env["EVAL_INTERVAL"]),
                episodes=tasks * (1 + pipe.n_skills * pipe.top_k * pipe.n_repeats),
                extractions=extractions,
                eval_cases=(config.local.n_eval_games * config.local.eval_repeats
                            if eval_cases is None else eval_cases))


@dataclass(frozen=True)
class Line:
    """One part of a launch: its seconds and how they were reckoned."""

    part: str
    seconds: float
    basis: str


def _measured_step(inputs: MeasuredInputs, method: str) -> tuple[Measured, Measured, Measured]:
    """(rollout, train, samples) of the method's measured step."""
    if method == "evolving":
        return inputs.evolving_rollout_s, inputs.evolving_train_s, inputs.evolving_step_samples
    return inputs.rollout_s, inputs.train_s, inputs.step_samples


def step_s(inputs: MeasuredInputs, plan: Plan) -> float:
    rollout, train, samples = _measured_step(inputs, plan.method)
    return (rollout.value + train.value) * plan.samples / samples.value + inputs.weight_push_s.value


def _step_basis(inputs: MeasuredInputs, plan: Plan) -> str:
    rollout, train, samples = _measured_step(inputs, plan.method)
    measured = (f"rollout {rollout.value:g} s ({rollout.source}) + train {train.value:g} s "
                f"({train.source}) + push {inputs.weight_push_s.value:g} s")
    if plan.samples == samples.value:
        return measured
    scale = plan.samples / samples.value
    return (f"SCALED: {plan.episodes} episodes + {plan.extractions} extractions = "
            f"{plan.samples} samples, the measured step x {plan.samples}/{samples.value:g}: "
            f"rollout {rollout.value * scale:.1f} s + train {train.value * scale:.1f} s + push; "
            f"measured: {measured}")


def _eval_lines(inputs: MeasuredInputs, plan: Plan) -> list[Line]:
    m = inputs
    one = plan.eval_cases * m.eval_case_s.value
    cases = f"{plan.eval_cases} cases"
    return [
        Line(f"eval before training ({cases}; the first: cold)",
             m.first_eval_extra_s.value + one,
             f"{m.first_eval_extra_s.source}; {m.eval_case_s.source}"),
        Line(f"{plan.evals_after} evals after every {plan.eval_interval} steps ({cases} each)",
             plan.evals_after * one, m.eval_case_s.source),
    ]


def budget_lines(inputs: MeasuredInputs, plan: Plan) -> list[Line]:
    """Every part of one launch from a bare machine, in the order it runs."""
    m = inputs
    return [
        Line("one failed machine start", m.failed_start_s.value, m.failed_start_s.source),
        Line(f"carry {m.carry_gb.value:g} GB of wheels and weights", m.carry_s.value,
             f"{m.carry_gb.source}; {m.carry_s.source}"),
        Line("setup", m.setup_s.value, m.setup_s.source),
        Line("launch until the first eval", m.launch_to_first_eval_s.value,
             m.launch_to_first_eval_s.source),
        *_eval_lines(m, plan),
        Line(f"{plan.steps} steps x (rollout + train + weight push)",
             plan.steps * step_s(m, plan), _step_basis(m, plan)),
        Line("first step's warm-up", m.first_step_warmup_s.value, m.first_step_warmup_s.source),
        Line("teardown", m.teardown_s.value, m.teardown_s.source),
        Line("polling between device calls", m.polling_s.value, m.polling_s.source),
    ]


def total_s(lines: list[Line]) -> float:
    return sum(line.seconds for line in lines)


def max_steps(inputs: MeasuredInputs, plan: Plan, limit_s: float = LIMIT_S,
              reserve_s: float = 0.0) -> int:
    """The most steps of `plan` that fit `limit_s` with `reserve_s` to spare (0 if none)."""
    def fits(steps: int) -> bool:
        lines = budget_lines(inputs, dataclasses.replace(plan, steps=steps))
        return total_s(lines) <= limit_s - reserve_s

    steps = 0
    while fits(steps + 1):
        steps += 1
    return steps


def _bases(plans: list[Plan], tables: list[list[Line]]) -> list[str]:
    """Each line's basis, per method where the methods' differ."""
    out = []
    for index, line in enumerate(tables[0]):
        bases = {lines[index].basis for lines in tables}
        if len(bases) == 1:
            out.append(f"- {line.part}: {line.basis}")
        else:
            out += [f"- {line.part} ({plan.method}): {lines[index].basis}"
                    for plan, lines in zip(plans, tables, strict=True)]
    return out


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
    fit = f"Most steps that fit {limit_s:,.0f} s with {reserve_s:,.0f} s to spare: {fits}."
    return "\n".join([*rows, "", fit, "", *_bases(plans, tables)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evolving_rl.slime_bridge.budget",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="a recipe profile's config (YAML)")
    parser.add_argument("--steps", type=int, help="steps (default: the profile's NUM_ROLLOUT)")
    parser.add_argument("--eval-cases", type=int,
                        help="cases of each evaluation (default: local.n_eval_games x "
                             "local.eval_repeats)")
    parser.add_argument("--limit-s", type=float, default=LIMIT_S)
    parser.add_argument("--reserve-s", type=float, default=RESERVE_S)
    args = parser.parse_args(argv)
    config, profile = load_config(args.config), recipe_profile(args.config)
    plans = [plan_of(config, profile, method, args.steps, args.eval_cases) for method in METHODS]
    print(render(MEASURED, plans, args.limit_s, args.reserve_s))
    over = [plan.method for plan in plans
            if total_s(budget_lines(MEASURED, plan)) > args.limit_s]
    if over:
        print(f"over {args.limit_s:,.0f} s: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
