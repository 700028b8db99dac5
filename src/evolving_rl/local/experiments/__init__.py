"""Experiment runners of the local backend: commands that run several local main jobs and
compare what they measured, above the job (they launch `python -m evolving_rl.local` as child
processes and read the runs' `metrics.jsonl`; the job never imports them).

- `compare` — methods x seeds of one profile side by side on one machine
  (`python -m evolving_rl.local.experiments.compare`, `scripts/run_local.sh compare`);
- `compare_report` — their aggregate: curves, held-out table, tests against the baseline.
"""
