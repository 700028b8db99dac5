"""Checkpoint evaluation: `python -m evolving_rl.evaluate` (what `scripts/*/eval.sh` run).

`policies` opens the evaluated policy (an SGLang server, an OpenAI-compatible endpoint, or an HF
folder run in-process by the local backend), `runner` runs every protocol on every split through
`pipeline.evaluation` with a resumable case store, `report` writes the JSON and Markdown reports
and the charts, `published` holds the reference numbers the report compares against.
"""
