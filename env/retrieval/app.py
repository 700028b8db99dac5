"""Flask app factory of the retrieval server: `/health` and `/search`.

Owns the HTTP surface only: body size limit (413), JSON decoding and validation (400 naming the
problem, via `evolving_rl.retrieval.protocol`), JSON errors for every HTTP error, and the search
service that turns query texts into vectors (reusing index vectors for exact indexed texts when
the model has no query prompt, else encoding them online) and asks the index for top-k.
"""

from __future__ import annotations

import json
import logging

import numpy as np
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from env.http_server import SURROGATE_MESSAGE, surrogate_field
from evolving_rl.config.schema import RetrievalConfig
from evolving_rl.retrieval.encoder import Encoder
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

    def search(self, req: SearchRequest) -> list[list[Hit]]:
        vectors = self.query_vectors(req.queries)
        return self.index.search(vectors, req.k, list(req.filters), req.order)


def _json_error(status: int, message: str) -> tuple[Response, int]:
    return jsonify(error=message, status=status), status


def create_app(index: SearchIndex, encoder: Encoder, cfg: RetrievalConfig) -> Flask:
    """Build the app serving `index` with `encoder`, limits from `cfg`."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    app.json.sort_keys = False
    service = SearchService(index, encoder)
    limits = Limits(cfg.max_k, cfg.max_batch_queries, frozenset(index.split_masks),
                    frozenset(index.type_masks))

    @app.get("/health")
    def health() -> Response:
        return jsonify(status="ok", model=index.model, size=index.size,
                       dimension=index.dimension, splits=sorted(index.split_masks),
                       task_types=sorted(index.type_masks), query_prompt=encoder.query_prompt)

    @app.post("/search")
    def search() -> Response:
        raw = request.get_data(cache=False)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
            raise RequestError(f"malformed JSON body: {err}") from None
        field = surrogate_field(body) if isinstance(body, dict) else None
        if field is not None:
            raise RequestError(f"{field or 'body'}: {SURROGATE_MESSAGE}")
        req = parse_search_request(body, limits)
        results = service.search(req)
        return jsonify(model=index.model,
                       results=[[hit_to_json(hit) for hit in hits] for hits in results])

    @app.errorhandler(RequestError)
    def bad_request(err: RequestError) -> tuple[Response, int]:
        return _json_error(400, str(err))

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> tuple[Response, int]:
        code = err.code or 500
        if code == 413:
            return _json_error(413, f"request body over {cfg.max_body_bytes} bytes")
        return _json_error(code, err.description or err.name)

    return app
