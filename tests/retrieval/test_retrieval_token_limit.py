"""A request over `retrieval.max_request_tokens` is refused by a cheap word count before the
tokenizer reads it (issue 60, item 8): the tokenizer, which took seconds over a maximal body, is
asked only when the words alone are within the limit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from env.retrieval.app import SearchService
from evolving_rl.retrieval.encoder import Encoder
from evolving_rl.retrieval.protocol import RequestError


class CountingTokenizer:
    """One token a word plus two specials, truncated at `max_length`; counts its calls."""

    model_max_length = 512

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, texts, truncation, max_length, **_kwargs):
        self.calls += 1
        return {"input_ids": [[0] * min(len(text.split()) + 2, max_length) for text in texts]}


def _service() -> tuple[SearchService, CountingTokenizer]:
    tokenizer = CountingTokenizer()
    model = SimpleNamespace(tokenizer=tokenizer, max_seq_length=256, prompts={},
                            get_embedding_dimension=lambda: 4)
    encoder = Encoder(model, "stub", batch_size=8, batch_tokens=4096)
    return SearchService(SimpleNamespace(), encoder), tokenizer


def test_words_over_the_limit_are_refused_without_the_tokenizer():
    service, tokenizer = _service()
    texts = tuple(f"{i} " + "word " * 299 for i in range(3))  # 300 words each, 256 read
    with pytest.raises(RequestError, match="the queries hold at least 768 tokens"):
        service.check_work(SimpleNamespace(queries=texts), 600)
    assert tokenizer.calls == 0


def test_words_within_the_limit_are_counted_by_the_tokenizer():
    service, tokenizer = _service()
    texts = tuple(f"{i} " + "word " * 198 for i in range(3))  # 597 words, 603 tokens
    with pytest.raises(RequestError, match="the queries hold 603 tokens"):
        service.check_work(SimpleNamespace(queries=texts), 600)
    assert tokenizer.calls == 1
    service.check_work(SimpleNamespace(queries=texts[:2]), 600)
