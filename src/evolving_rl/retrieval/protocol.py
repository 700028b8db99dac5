"""HTTP wire types of the retrieval server, shared by the server and its clients.

Owns validation of a `/search` body: `parse_search_request` turns untrusted JSON into a typed
`SearchRequest` or raises `RequestError` naming the offending field (`field`: its dotted path in
the body, as `env.wire` names fields, e.g. `queries.1`; `body` for the body as a whole).

Request body::

    {"query": str} or {"queries": [str, ...]},      # exactly one; each 1..max_query_chars
    "k": int,                                        # 1..max_k
    "exclude_ids": [str, ...],                       # optional, applied to every query
    "exclude_ids_per_query": [[str, ...], ...],      # optional, one list per query
    "split": str, "task_types": [str, ...],          # optional filters
    "order": "most_similar" | "least_similar"        # optional, default most_similar

Response body: `{"model": str, "results": [[hit, ...], ...]}`, one list per query (also for
`"query"`), each hit `{"id", "question", "splits", "task_type", "score"}`.

Memory: a request's decoded body and its `SearchRequest`, search masks included, take at most
`MEMORY_PER_BODY_BYTE` times the body's size (measured 15-25x under tracemalloc, the most for
short distinct ids; tests/retrieval/test_retrieval_index.py): `exclude_ids` is held as one set
that every query's filter shares, each query's own ids as a set of their own. At the 1 MiB body
limit that is at most 32 MiB a request in flight. (Copying the shared set into every query's
filter, as before, took ~1 GB for one valid 1 MiB body.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from evolving_rl.retrieval.index import Hit, Order, SearchFilter

ORDERS = ("most_similar", "least_similar")
MEMORY_PER_BODY_BYTE = 32
FIELDS = {"query", "queries", "k", "exclude_ids", "exclude_ids_per_query", "split",
          "task_types", "order"}


class RequestError(ValueError):
    """A client sent a request the server cannot serve (answered with HTTP 400 naming `field`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class SearchRequest:
    """A validated `/search` body."""

    queries: tuple[str, ...]
    k: int
    filters: tuple[SearchFilter, ...]
    order: Order = "most_similar"


@dataclass(frozen=True)
class Limits:
    """What the server accepts: limits from config, names from the loaded index."""

    max_k: int
    max_queries: int
    max_query_chars: int
    splits: frozenset[str]
    task_types: frozenset[str]


def _string_list(body: dict[str, Any], name: str, allow_empty: bool = True) -> list[str] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(name, f"'{name}' must be a list of strings")
    if not allow_empty and not value:
        raise RequestError(name, f"'{name}' must not be empty")
    return value


def _queries(body: dict[str, Any], limits: Limits) -> tuple[str, ...]:
    if ("query" in body) == ("queries" in body):
        raise RequestError("query", "give exactly one of 'query' (a string) or 'queries' (a list)")
    if "query" in body:
        if not isinstance(body["query"], str):
            raise RequestError("query", "'query' must be a string")
        queries = [body["query"]]
    else:
        queries = _string_list(body, "queries", allow_empty=False) or []
    if len(queries) > limits.max_queries:
        raise RequestError("queries", f"'queries' has {len(queries)} items; "
                                      f"at most {limits.max_queries}")
    for i, query in enumerate(queries):
        field, name = ("query", "'query'") if "query" in body else (f"queries.{i}",
                                                                    f"'queries[{i}]'")
        if not query.strip():
            raise RequestError(field, f"{name} must not be empty")
        if len(query) > limits.max_query_chars:
            raise RequestError(field, f"{name} has {len(query)} characters; at most "
                                      f"{limits.max_query_chars} (retrieval.max_query_chars)")
    return tuple(queries)


def _k(body: dict[str, Any], limits: Limits) -> int:
    k = body.get("k")
    if isinstance(k, bool) or not isinstance(k, int):
        raise RequestError("k", "'k' must be an integer")
    if not 1 <= k <= limits.max_k:
        raise RequestError("k", f"'k' must be between 1 and {limits.max_k}, got {k}")
    return k


def _exclusions(body: dict[str, Any],
                n_queries: int) -> tuple[frozenset[str], list[frozenset[str]]]:
    """The ids excluded for every query (one set, shared) and each query's own: never a copy
    of the shared set per query, so the sets take memory in proportion to the body."""
    shared = frozenset(_string_list(body, "exclude_ids") or ())
    per_query = body.get("exclude_ids_per_query")
    if per_query is None:
        return shared, [frozenset()] * n_queries
    if not isinstance(per_query, list) or len(per_query) != n_queries:
        raise RequestError("exclude_ids_per_query",
                           f"'exclude_ids_per_query' must be a list of {n_queries} lists")
    own = []
    for i, ids in enumerate(per_query):
        if not isinstance(ids, list) or not all(isinstance(v, str) for v in ids):
            raise RequestError(f"exclude_ids_per_query.{i}",
                               f"'exclude_ids_per_query[{i}]' must be a list of strings")
        own.append(frozenset(ids) - shared)
    return shared, own


def parse_search_request(body: Any, limits: Limits) -> SearchRequest:
    """Validate a decoded JSON body into a `SearchRequest`."""
    if not isinstance(body, dict):
        raise RequestError("body", "request body must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise RequestError(unknown[0], f"unknown field '{unknown[0]}' "
                                       f"(known: {', '.join(sorted(FIELDS))})")
    queries = _queries(body, limits)
    k = _k(body, limits)
    split = body.get("split")
    if split is not None and (not isinstance(split, str) or split not in limits.splits):
        raise RequestError("split", f"unknown split {split!r} "
                                    f"(known: {', '.join(sorted(limits.splits))})")
    task_types = _string_list(body, "task_types", allow_empty=False)
    for i, task_type in enumerate(task_types or ()):
        if task_type not in limits.task_types:
            raise RequestError(f"task_types.{i}", f"unknown task type {task_type!r} "
                               f"(known: {', '.join(sorted(limits.task_types))})")
    order = body.get("order", "most_similar")
    if order not in ORDERS:
        raise RequestError("order", f"'order' must be one of {list(ORDERS)}, got {order!r}")
    types = tuple(task_types) if task_types is not None else None
    shared, own = _exclusions(body, len(queries))
    filters = tuple(SearchFilter(split, types, shared, ids) for ids in own)
    return SearchRequest(queries, k, filters, order)


def hit_to_json(hit: Hit) -> dict[str, Any]:
    """Wire form of one hit."""
    data = asdict(hit)
    data["splits"] = list(hit.splits)
    return data
