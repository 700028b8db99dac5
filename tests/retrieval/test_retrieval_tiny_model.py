"""The non-MiniLM path (e.g. Qwen3-Embedding): a local sentence-transformers folder whose config
declares a "query" prompt, stood in for by a tiny randomly initialised BERT in the same layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from evolving_rl.config import load_config
from evolving_rl.retrieval.build import refresh_cache
from evolving_rl.retrieval.cache import load_cache
from evolving_rl.retrieval.encoder import (
    ModelLoadError,
    load_encoder,
    resolve_model,
    weights_dtype,
)

QUERY_PROMPT = "Instruct: Given a task description, retrieve similar tasks\nQuery:"
HIDDEN = 32


def make_tiny_model(folder: Path) -> Path:
    """Write a tiny random BERT as a sentence-transformers folder (last-token pooling,
    normalisation, prompts in config_sentence_transformers.json, like Qwen3-Embedding)."""
    import torch
    from transformers import BertConfig, BertModel

    minilm = resolve_model("minilm").path
    folder.mkdir(parents=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        shutil.copy(minilm / name, folder / name)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=HIDDEN, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64)
    BertModel(config).save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "2_Normalize").mkdir()
    files = {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize",
             "type": "sentence_transformers.models.Normalize"}],
        "sentence_bert_config.json": {"max_seq_length": 64, "do_lower_case": False},
        "config_sentence_transformers.json": {
            "prompts": {"query": QUERY_PROMPT, "document": ""}, "default_prompt_name": None},
        "1_Pooling/config.json": {"word_embedding_dimension": HIDDEN,
                                  "pooling_mode_lasttoken": True},
    }
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content))
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / "Tiny-Embedding")


def test_local_model_uses_its_query_prompt(tmp_path, tiny_model, prepared_dir, make_config):
    cfg = load_config(make_config(tmp_path, prepared_dir, model=str(tiny_model), batch_size=7))
    encoder = load_encoder(cfg.retrieval)
    assert (encoder.name, encoder.dimension, encoder.batch_size) == ("Tiny-Embedding", HIDDEN, 7)
    assert encoder.query_prompt == QUERY_PROMPT
    text = "put a clean mug in coffeemachine."
    as_doc = encoder.encode_documents([text])[0]
    as_query = encoder.encode_queries([text])[0]
    assert as_doc.dtype == np.float32 and as_doc.shape == (HIDDEN,)
    np.testing.assert_allclose(np.linalg.norm([as_doc, as_query], axis=1), 1.0, atol=1e-5)
    assert not np.allclose(as_doc, as_query)
    explicit = encoder.model.encode([QUERY_PROMPT + text], normalize_embeddings=True)[0]
    np.testing.assert_allclose(as_query, explicit, atol=1e-5)

    stats = refresh_cache(cfg, encoder, splits=["valid_unseen"], show_progress=False)
    cache = load_cache(cfg.retrieval.cache_path)
    assert (cache.model, cache.dimension, stats.n_encoded) == ("Tiny-Embedding", HIDDEN, 30)


def test_configured_query_prompt_overrides_the_models(tmp_path, tiny_model, prepared_dir,
                                                      make_config):
    cfg = load_config(make_config(tmp_path, prepared_dir, model=str(tiny_model),
                                  query_prompt="query: "))
    assert load_encoder(cfg.retrieval).query_prompt == "query: "


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="folder not found"):
        resolve_model(str(tmp_path / "Qwen3-Embedding-4B"))


def test_weights_load_in_bfloat16_on_a_gpu_unless_told_otherwise():
    assert weights_dtype("cuda", "auto") == weights_dtype("cuda:7", "auto") == "bfloat16"
    assert weights_dtype("cpu", "auto") == weights_dtype("cpu:1", "auto") == "float32"
    assert weights_dtype("cuda", "float32") == "float32"


@pytest.mark.parametrize(("device", "dtype", "expected"), [
    ("cpu", "auto", "float32"), ("cpu:0", "auto", "float32"), ("cpu", "bfloat16", "bfloat16")])
def test_the_configured_dtype_is_the_weights_dtype(tmp_path, tiny_model, prepared_dir,
                                                   make_config, device, dtype, expected):
    import torch

    cfg = load_config(make_config(tmp_path, prepared_dir, model=str(tiny_model), dtype=dtype,
                                  device=device))
    encoder = load_encoder(cfg.retrieval)
    assert {p.dtype for p in encoder.model.parameters()} == {getattr(torch, expected)}
    vector = encoder.encode_queries(["put a clean mug in coffeemachine."])[0]
    assert vector.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vector), 1.0, atol=1e-2)
