"""The local backend's inference engine: an in-process HF causal LM that decodes many rows at
once and returns exactly the sampled ids with their raw temperature-1 log-probs.

Its one entry point is `LocalPolicy` (`policy.py`), the pipeline's `PolicyClient`; the rest of
the code imports only that. Inside, by concern:

- decoding: `decoder.py` (continuous batching over a KV cache that grows in place,
  `growing_cache.py`: the CPU path) and `static_decode.py` (the same rows in pre-allocated KV
  slots, `slot_cache.py`, stepped on the device by `slot_engine.py`, CUDA graphs on a GPU);
- sampling: `sampling.py`, the one sampler both decoders call;
- reuse of stored KV prefixes across calls: `kv_cache.py`;
- model surgery for speed: `linear_layout.py` (transposed weights for CPU decode),
  `decode_attention.py` (grouped-query decode attention without copying the KV) and
  `fused_norm.py` (one-kernel RMSNorm on the GPU path).
"""

from evolving_rl.local.engine.policy import LocalPolicy

__all__ = ["LocalPolicy"]
