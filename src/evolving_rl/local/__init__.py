"""Embedded local backend: everything needed to train on one machine (CPU or one GPU).

- `model`    — "smollm2" / "qwen2.5-coder-0.5b" (GGUF files converted once) or any HF folder;
- `policy`   — in-process HF policy behind the `PolicyClient` interface (engine thread);
- `decoder`  — continuous batching: rows join and leave the running batch at any step;
- `kv_cache` — reuse of stored KV prefixes across calls (multi-turn episodes);
- `trainer`  — GRPO trainer with the slime path's objective (`evolving_rl.losses`), checkpoints;
- `metrics` / `plots` — the run's JSONL log and PNG plot;
- `job` / `__main__` — the main job (data, retrieval cache, servers, train, evaluate, summary).
"""
