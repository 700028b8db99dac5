"""Async client of the retrieval server (`/search`): top-k similar tasks for a batch of queries.

Owns the client side of the wire described in `evolving_rl.retrieval.protocol`. A search is
read-only, so it is retried on transport errors and 5xx answers (bounded, from config).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from evolving_rl.clients.http import (
    Retry,
    RetryPolicy,
    ServerError,
    new_session,
    post_json,
)
from evolving_rl.config.schema import ClientConfig


@dataclass(frozen=True)
class RetrievedTask:
    """One hit of a search."""

    id: str
    question: str
    task_type: str
    score: float


@dataclass(frozen=True)
class SearchQuery:
    """One query and the task ids it must not return."""

    text: str
    exclude_ids: tuple[str, ...] = ()


def _hits(url: str, raw: Any) -> list[RetrievedTask]:
    if not isinstance(raw, list):
        raise ServerError(url, 200, f"malformed result list {raw!r:.200}")
    out = []
    for hit in raw:
        if (not isinstance(hit, dict) or not isinstance(hit.get("id"), str)
                or not isinstance(hit.get("score", 0.0), (int, float))):
            raise ServerError(url, 200, f"malformed hit {hit!r:.200}")
        out.append(RetrievedTask(hit["id"], str(hit.get("question", "")),
                                 str(hit.get("task_type", "")), float(hit.get("score", 0.0))))
    return out


class RetrievalClient:
    """Batched `/search` calls with per-query exclusions."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, cfg: ClientConfig) -> None:
        self._session = session
        self._url = f"{base_url.rstrip('/')}/search"
        self._cfg = cfg
        self._retry = RetryPolicy(cfg.max_retries, cfg.retry_backoff_s)

    @classmethod
    def open(cls, base_url: str, cfg: ClientConfig) -> RetrievalClient:
        """A client with its own connection pool; call inside the event loop, `close` after."""
        return cls(new_session(cfg.pool_size, cfg.retrieval_timeout_s), base_url, cfg)

    async def close(self) -> None:
        await self._session.close()

    async def search(self, queries: Sequence[SearchQuery], k: int, *, split: str | None = None,
                     task_types: Sequence[str] | None = None,
                     order: str = "most_similar") -> list[list[RetrievedTask]]:
        """Top-`k` tasks per query, best first (or worst first for "least_similar")."""
        body: dict[str, Any] = {
            "queries": [query.text for query in queries], "k": k, "order": order,
            "exclude_ids_per_query": [list(query.exclude_ids) for query in queries]}
        if split is not None:
            body["split"] = split
        if task_types:
            body["task_types"] = list(task_types)
        data = await post_json(self._session, self._url, body, retry=Retry.IDEMPOTENT,
                               policy=self._retry, timeout_s=self._cfg.retrieval_timeout_s)
        results = data.get("results")
        if not isinstance(results, list) or len(results) != len(queries):
            raise ServerError(self._url, 200, f"expected {len(queries)} result lists")
        return [_hits(self._url, hits) for hits in results]
