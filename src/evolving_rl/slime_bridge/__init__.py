"""The bridge between our pipeline and slime: everything `evolving_rl.slime_hooks` delegates to.

Modules:
  - `slime_api`  — the only place that imports slime (lazily, inside functions);
  - `settings`   — our config from `--custom-config-path`, and checks of the slime args we rely on;
  - `samples`    — `TrainSample` → slime `Sample` (our tag in `metadata`), reward post-process;
  - `train_data` — samples → slime train data, with the per-token role channel for the loss;
  - `loss`       — the custom loss on slime's micro-batch (math in `evolving_rl.losses`);
  - `metrics`    — rollout and eval metrics for the loggers;
  - `runtime`    — the event loop, the pipeline context and the prompt rows of one process.
"""
