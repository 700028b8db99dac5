"""Flask app factory of the retrieval server: `/health` and `/search`.

Owns the HTTP surface only: the body (a JSON object, at most `max_body_bytes`: `env.wire`),
validation (400 naming the problem and its `field`, via `evolving_rl.retrieval.protocol`; a
request asking the model to read more than `max_request_tokens` tokens is one), errors
in the wire's one JSON shape `{"error", "message", "field"}` (`env.wire.install_error_handlers`;
503 `stopping` for a request whose encoding the server's stop cut short), and the search
service that turns query texts into vectors (reusing index vectors for exact indexed texts when
the model has no query prompt, else encoding them online) and asks the index for top-k.
"""

from __future__ import annotations

import logging
import os

import numpy as np
from flask import Flask, Response, jsonify

from env.wire import WireError, json_app, read_json_object
from evolving_rl.config.schema import RetrievalConfig
from evolving_rl.retrieval.encoder import Encoder, EncoderClosed
from evolving_rl.retrieval.index import Hit, SearchIndex
from evolving_rl.retrieval.protocol import (
    Limits,
    RequestError,
    SearchRequest,
    hit_to_json,
    parse_search_request,
)

logger = logging.getLogger(__name__)


class SearchService:
    """Query texts → vectors → top-k hits, for one index and one encoder."""

    def __init__(self, index: SearchIndex, encoder: Encoder) -> None:
        self.index = index
        self.encoder = encoder
        # Index vectors are document embeddings: only valid as query vectors without a prompt.
        self.reuse_index_vectors = not encoder.query_prompt

    def query_vectors(self, queries: tuple[str, ...]) -> np.ndarray:
        vectors = np.empty((len(queries), self.index.dimension), dtype=np.float32)
        todo: list[int] = []
        for i, text in enumerate(queries):
            pos = self.index.by_question.get(text) if self.reuse_index_vectors else None
            if pos is None:
                todo.append(i)
            else:
                vectors[i] = self.index.vectors[pos]
        if todo:
            vectors[todo] = self.encoder.encode_queries([queries[i] for i in todo])
        return vectors

    def check_work(self, req: SearchRequest, max_tokens: int) -> None:
        """Refuse a request whose distinct queries hold more than `max_tokens` tokens (counted
        whether or not they are cached: the answer never depends on the server's state); a
        request whose words alone are over the limit is refused without the tokenizer
        (`Encoder.token_floor`), which would take seconds over a maximal body."""
        texts = list(dict.fromkeys(req.queries))
        floor = self.encoder.token_floor(texts, self.encoder.query_prompt)
        if floor > max_tokens:  # refused by the cheap count, the tokenizer never asked
            tokens, held = floor, f"at least {floor}"
        else:
            tokens = sum(self.encoder.token_counts(texts, self.encoder.query_prompt))
            held = str(tokens)
        if tokens > max_tokens:
            raise RequestError("queries", f"the queries hold {held} tokens (as the model "
                               f"reads them); at most {max_tokens} a request "
                               "(retrieval.max_request_tokens): split the batch")

    def search(self, req: SearchRequest) -> list[list[Hit]]:
        vectors = self.query_vectors(req.queries)
        return self.index.search(vectors, req.k, list(req.filters), req.order)


def create_app(index: SearchIndex, encoder: Encoder, cfg: RetrievalConfig) -> Flask:
    """Build the app serving `index` with `encoder`, limits from `cfg`."""
    app = json_app(__name__, cfg.max_body_bytes)
    service = SearchService(index, encoder)
    limits = Limits(cfg.max_k, cfg.max_batch_queries, cfg.max_query_chars,
                    frozenset(index.split_masks), frozenset(index.type_masks))

    @app.get("/health")
    def health() -> Response:
        return jsonify(status="ok", pid=os.getpid(), model=index.model, size=index.size,
                       dimension=index.dimension, splits=sorted(index.split_masks),
                       task_types=sorted(index.type_masks), query_prompt=encoder.query_prompt,
                       encoder_waiting=encoder.waiting)

    @app.post("/search")
    def search() -> Response:
        req = parse_search_request(read_json_object(), limits)
        service.check_work(req, cfg.max_request_tokens)
        results = service.search(req)
        return jsonify(model=index.model,
                       results=[[hit_to_json(hit) for hit in hits] for hits in results])

    @app.errorhandler(RequestError)
    def bad_request(err: RequestError) -> Response:
        return WireError(400, "bad_request", str(err), err.field).response()

    @app.errorhandler(EncoderClosed)
    def stopping(err: EncoderClosed) -> Response:
        return WireError(503, "stopping", f"the server is stopping: {err}").response()

    return app
