"""Embedded local backend: everything needed to train on one machine (CPU or one GPU).

- `engine/`  — the inference engine; its one entry point, `LocalPolicy`, is the in-process
  `PolicyClient` (continuous batching, KV prefix reuse, static slots and CUDA graphs on a GPU);
- `model`    — "smollm2" / "qwen2.5-coder-0.5b" / "qwen2.5-coder-1.5b" (GGUF files converted
  once) or any HF folder;
- `trainer`  — GRPO trainer with the slime path's objective (`evolving_rl.losses`), checkpoints;
- `servers`  — the env and retrieval servers a one-machine run starts (the job, evaluation);
- `metrics` / `scalars` / `plots` — the run's JSONL log, its TensorBoard / W&B mirrors, its plot;
- `job` / `__main__` — the main job (data, retrieval cache, servers, train, evaluate, summary);
- `experiments/` — runners over several jobs (`compare`: methods x seeds side by side).
"""
