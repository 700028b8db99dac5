"""Server processes: ALFWorld router + workers, retrieval server (run from the repository root).

Servers depend on `evolving_rl.config` for their settings and never import the trainer.
"""
