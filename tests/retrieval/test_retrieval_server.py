"""The retrieval server over real HTTP: a subprocess on a free loopback port, real MiniLM."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
from retrieval_helpers import (
    MAX_BODY,
    MAX_K,
    MAX_QUERIES,
    MAX_QUERY_CHARS,
    MAX_REQUEST_TOKENS,
    assert_valid_top_k,
)

from evolving_rl.retrieval.cache import save_cache
from evolving_rl.retrieval.index import SearchFilter, SearchIndex
from tests.fakes.synthetic_tasks import unseen_queries
from tests.servers import (
    assert_served_under_hostile_connections,
    health_latencies_under_slow_clients,
)


def post(server, body, **kwargs):
    return requests.post(f"{server.url}/search", json=body, timeout=30, **kwargs)


def ids(hits):
    return [h["id"] for h in hits]


def test_health(server, cache):
    body = requests.get(f"{server.url}/health", timeout=10).json()
    assert body["model"] == "all-MiniLM-L6-v2" == cache.model
    assert (body["size"], body["dimension"]) == (len(cache.rows), 384)
    assert "train" in body["splits"] and "look_at_obj_in_light" in body["task_types"]


def test_indexed_query_ranks_itself_first_unless_excluded(server, cache):
    row = cache.rows[5]
    hits = post(server, {"query": row.question, "k": 3}).json()["results"][0]
    assert hits[0]["id"] == row.id and hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert hits[0]["splits"] == list(row.splits) and hits[0]["task_type"] == row.task_type
    excluded = post(server, {"query": row.question, "k": 3, "exclude_ids": [row.id]}).json()
    assert ids(excluded["results"][0]) == ids(hits)[1:] + ids(excluded["results"][0])[2:]
    assert row.id not in ids(excluded["results"][0])


def test_top_k_is_correct_with_position_ties(server, cache):
    index = SearchIndex(cache)
    for order in ("most_similar", "least_similar"):
        for flt in (SearchFilter(), SearchFilter(split="train_seen"),
                    SearchFilter(task_types=("pick_two_obj_and_place",))):
            body = {"queries": [r.question for r in cache.rows[:MAX_QUERIES]], "k": MAX_K,
                    "order": order, "split": flt.split,
                    "task_types": list(flt.task_types) if flt.task_types else None}
            results = post(server, body).json()["results"]
            mask = index.allowed(flt)
            for i, hits in enumerate(results):
                picked = [index.position[h["id"]] for h in hits]
                assert_valid_top_k(picked, cache.vectors, cache.vectors[i], mask, MAX_K, order)
                scores = [h["score"] for h in hits]
                assert scores == sorted(scores, reverse=order == "most_similar")


def test_unseen_queries_are_encoded_online(server, cache, encoder):
    """The server encodes in its own batch, this process in another: the two query vectors agree
    within float32 noise, so the hits are checked as a correct top-k within a tolerance."""
    queries = unseen_queries(4, seed=11)
    assert not set(queries) & {r.question for r in cache.rows}
    results = post(server, {"queries": queries, "k": 5}).json()["results"]
    vectors, index = encoder.encode_queries(queries), SearchIndex(cache)
    everything = np.ones(index.size, dtype=bool)
    for hits, vector in zip(results, vectors, strict=True):
        picked = [index.position[h["id"]] for h in hits]
        assert_valid_top_k(picked, cache.vectors, vector, everything, 5, tol=1e-4)
        local = cache.vectors[picked].astype(np.float64) @ vector.astype(np.float64)
        assert [h["score"] for h in hits] == pytest.approx(local.tolist(), abs=1e-4)


def test_filters(server, cache):
    query = "put a hot potato in the fridge."
    hits = post(server, {"query": query, "k": MAX_K, "split": "valid_unseen"}).json()
    assert hits["results"][0] and all("valid_unseen" in h["splits"]
                                      for h in hits["results"][0])
    types = ["look_at_obj_in_light", "pick_cool_then_place_in_recep"]
    hits = post(server, {"query": query, "k": MAX_K, "task_types": types}).json()
    assert {h["task_type"] for h in hits["results"][0]} <= set(types)
    n_look_valid = sum(1 for r in cache.rows if r.task_type == types[0]
                       and "valid_seen" in r.splits)
    hits = post(server, {"query": query, "k": MAX_K, "split": "valid_seen",
                         "task_types": types[:1]}).json()
    assert len(hits["results"][0]) == n_look_valid < MAX_K


def test_batch_equals_single_queries_and_per_query_exclusion(server, cache):
    rows = cache.rows[10:14]
    batch = post(server, {"queries": [r.question for r in rows], "k": 4,
                          "exclude_ids_per_query": [[r.id] for r in rows]}).json()["results"]
    for row, hits in zip(rows, batch, strict=True):
        single = post(server, {"query": row.question, "k": 4, "exclude_ids": [row.id]}).json()
        assert ids(single["results"][0]) == ids(hits) and row.id not in ids(hits)


def test_concurrent_clients(server, cache):
    queries = unseen_queries(24, seed=5)

    def one(query):
        return post(server, {"query": query, "k": 3})

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(one, queries))
    assert [r.status_code for r in responses] == [200] * len(queries)
    # One query alone and eight in a batch are encoded in different batches (padding included):
    # equal within float32 noise, so near-ties may swap; scores rank by rank within a tolerance.
    again = post(server, {"queries": queries[:MAX_QUERIES], "k": 3}).json()["results"]
    for response, hits in zip(responses, again, strict=False):
        alone = response.json()["results"][0]
        assert [h["score"] for h in alone] == pytest.approx([h["score"] for h in hits], abs=1e-4)
        swapped = set(ids(alone)) ^ set(ids(hits))
        assert all(abs(h["score"] - alone[-1]["score"]) <= 1e-4
                   for h in alone + hits if h["id"] in swapped)


@pytest.mark.parametrize("body, message, field", [
    ({"query": "", "k": 3}, "'query' must not be empty", "query"),
    ({"query": "   ", "k": 3}, "'query' must not be empty", "query"),
    ({"query": 7, "k": 3}, "'query' must be a string", "query"),
    ({"query": None, "k": 3}, "'query' must be a string", "query"),
    ({"queries": "one", "k": 3}, "'queries' must be a list of strings", "queries"),
    ({"queries": ["ok", 5], "k": 3}, "'queries' must be a list of strings", "queries"),
    ({"queries": ["ok", ""], "k": 3}, r"'queries\[1\]' must not be empty", "queries.1"),
    ({"queries": [], "k": 3}, "'queries' must not be empty", "queries"),
    ({"queries": ["q"] * (MAX_QUERIES + 1), "k": 3}, f"at most {MAX_QUERIES}", "queries"),
    ({"query": "a", "queries": ["b"], "k": 3}, "exactly one of 'query'", "query"),
    ({"k": 3}, "exactly one of 'query'", "query"),
    ({"query": "a"}, "'k' must be an integer", "k"),
    ({"query": "a", "k": 0}, "'k' must be between 1 and", "k"),
    ({"query": "a", "k": -2}, "'k' must be between 1 and", "k"),
    ({"query": "a", "k": MAX_K + 1}, f"'k' must be between 1 and {MAX_K}", "k"),
    ({"query": "a", "k": "3"}, "'k' must be an integer", "k"),
    ({"query": "a", "k": 2.5}, "'k' must be an integer", "k"),
    ({"query": "a", "k": True}, "'k' must be an integer", "k"),
    ({"query": "a", "k": 3, "split": "test"}, "unknown split 'test'", "split"),
    ({"query": "a", "k": 3, "split": ["train"]}, "unknown split", "split"),
    ({"query": "a", "k": 3, "task_types": ["dance"]}, "unknown task type 'dance'",
     "task_types.0"),
    ({"query": "a", "k": 3, "task_types": "look_at_obj_in_light"}, "'task_types' must be a list",
     "task_types"),
    ({"query": "a", "k": 3, "task_types": []}, "'task_types' must not be empty", "task_types"),
    ({"query": "a", "k": 3, "exclude_ids": "x"}, "'exclude_ids' must be a list of strings",
     "exclude_ids"),
    ({"query": "a", "k": 3, "exclude_ids": [1]}, "'exclude_ids' must be a list of strings",
     "exclude_ids"),
    ({"queries": ["a", "b"], "k": 3, "exclude_ids_per_query": [["x"]]},
     "'exclude_ids_per_query' must be a list of 2 lists", "exclude_ids_per_query"),
    ({"queries": ["a"], "k": 3, "exclude_ids_per_query": [[3]]},
     r"'exclude_ids_per_query\[0\]' must be a list of strings", "exclude_ids_per_query.0"),
    ({"query": "a", "k": 3, "order": "random"}, "'order' must be one of", "order"),
    ({"query": "a", "k": 3, "top": 3}, "unknown field 'top'", "top"),
    (["a", "list"], "body must be a JSON object", "body"),
    ("a string", "body must be a JSON object", "body"),
])
def test_bad_input_is_400_naming_the_problem_and_its_field(server, body, message, field):
    response = post(server, body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["error"] == ("malformed_json" if "JSON object" in message else "bad_request")
    assert re.search(message, error["message"]), error
    assert error["field"] == field, error


def test_a_query_over_max_query_chars_is_400_naming_it(server):
    """The bound is the setting's (retrieval.max_query_chars), well under the body limit."""
    longest = "x" * MAX_QUERY_CHARS
    assert post(server, {"query": longest, "k": 1}).status_code == 200
    for body, field, name in (({"query": longest + "y", "k": 1}, "query", "'query'"),
                              ({"queries": ["ok", longest + "y"], "k": 1}, "queries.1",
                               "'queries[1]'")):
        response = post(server, body)
        assert response.status_code == 400, response.text
        assert response.json() == {
            "error": "bad_request", "field": field,
            "message": f"{name} has {MAX_QUERY_CHARS + 1} characters; at most "
                       f"{MAX_QUERY_CHARS} (retrieval.max_query_chars)"}


def test_work_over_max_request_tokens_is_400_naming_the_queries(server):
    """The model's work one request may ask is bounded (retrieval.max_request_tokens), counted
    as the model reads the distinct queries: 199 words are 201 tokens with [CLS] and [SEP]."""
    texts = [f"{i} " + "word " * 198 for i in range(3)]
    response = post(server, {"queries": texts, "k": 1})
    assert response.status_code == 400, response.text
    assert response.json() == {
        "error": "bad_request", "field": "queries",
        "message": f"the queries hold 603 tokens (as the model reads them); at most "
                   f"{MAX_REQUEST_TOKENS} a request (retrieval.max_request_tokens): split the "
                   "batch"}
    assert post(server, {"queries": texts[:2], "k": 1}).status_code == 200
    assert post(server, {"queries": [texts[2]] * 3, "k": 1}).status_code == 200


@pytest.mark.parametrize("data", [b"{not json", b"", b"\xff\xfe\x00garbage", b"[" * 4000])
def test_malformed_json_is_400(server, data):
    response = requests.post(f"{server.url}/search", data=data, timeout=30,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json() == {"error": "malformed_json", "message": "body is not valid JSON",
                               "field": "body"}


def test_one_body_limit_is_413_naming_it_whatever_the_size(server):
    """The app and waitress refuse alike: one limit (retrieval.max_body_bytes), one message."""
    expected = {"error": "body_too_large", "message": f"body over {MAX_BODY} bytes",
                "field": "body"}
    for size in (MAX_BODY, 5 * MAX_BODY):
        body = json.dumps({"query": "x" * size, "k": 1}).encode()
        response = requests.post(f"{server.url}/search", data=body, timeout=30)
        assert response.status_code == 413 and response.json() == expected


def test_a_lone_surrogate_is_a_400_naming_its_field(server):
    for body, field in (({"query": "heat \ud800 mug", "k": 1}, "query"),
                        ({"queries": ["ok", "\udfff"], "k": 1}, "queries.1")):
        response = requests.post(f"{server.url}/search", json=body, timeout=30)
        assert response.status_code == 400, response.text
        assert response.json()["field"] == field
        assert response.json()["message"].startswith(f"{field}: holds a lone surrogate")


def test_health_is_served_while_200_slow_clients_hold_connections(server):
    latencies = health_latencies_under_slow_clients(server.url)
    assert max(latencies) < 2.0, latencies


def test_normal_clients_are_answered_under_2000_hostile_connections(server, cache):
    question = cache.rows[0].question
    assert_served_under_hostile_connections(
        server.url, lambda: post(server, {"query": question, "k": 3}).status_code == 200)


def test_unknown_route_and_method_are_json_errors(server):
    assert requests.get(f"{server.url}/nope", timeout=10).json()["error"] == "no_such_route"
    assert requests.get(f"{server.url}/search", timeout=10).json()["error"] == "method_not_allowed"


def test_cache_of_another_model_is_refused(tmp_path, cache, prepared_dir, make_config):
    config_path = make_config(tmp_path, prepared_dir)
    save_cache(cache.__class__("Qwen3-Embedding-4B", cache.dimension, cache.rows, cache.hashes,
                               cache.vectors), tmp_path / "cache.npz")
    done = subprocess.run([sys.executable, "-m", "env.retrieval", "--config", str(config_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "built with model 'Qwen3-Embedding-4B'" in done.stderr
    assert "configured with 'all-MiniLM-L6-v2'" in done.stderr
    assert not list((tmp_path / "logs").glob("*.pid"))
