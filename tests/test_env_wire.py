"""The environment servers' shared wire (env/wire.py), on a bare Flask app: the JSON error shape,
bodies that are not a JSON object, bounded string fields and Flask's own errors."""

from __future__ import annotations

import pytest
from flask import Flask, Response, jsonify

from env.wire import install_error_handlers, read_json_object, string_field

LIMIT = 64


@pytest.fixture
def client():
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = LIMIT
    install_error_handlers(app)

    @app.post("/echo")
    def echo() -> Response:
        body = read_json_object()
        note = string_field(body, "note", 8, field="echo.note", required=False)
        return jsonify(name=string_field(body, "name", 8), note=note)

    return app.test_client()


def test_fields_read(client):
    assert client.post("/echo", json={"name": "a"}).json == {"name": "a", "note": ""}
    assert client.post("/echo", json={"name": "a", "note": " "}).json["note"] == " "


@pytest.mark.parametrize(("body", "field", "words"), [
    ({}, "name", "missing"),
    ({"name": 3}, "name", "must be a string, got int"),
    ({"name": "  "}, "name", "non-empty string of at most 8"),
    ({"name": "x" * 9}, "name", "non-empty string of at most 8"),
    ({"name": "a", "note": "x" * 9}, "echo.note", "at most 8"),
    ({"name": "\ud800"}, "name", "lone surrogate"),
])
def test_bad_fields_are_400_naming_the_field(client, body, field, words):
    resp = client.post("/echo", json=body)
    assert resp.status_code == 400
    assert resp.json["error"] == "bad_request" and resp.json["field"] == field
    assert words in resp.json["message"]


@pytest.mark.parametrize("data", [b"{", b"[1]", b"\xff"])
def test_a_body_that_is_no_json_object_is_malformed(client, data):
    resp = client.post("/echo", data=data, content_type="application/json")
    assert resp.status_code == 400
    assert resp.json == {"error": "malformed_json", "message": resp.json["message"],
                         "field": "body"}


def test_flask_errors_answer_json(client):
    assert client.get("/nowhere").json["error"] == "no_such_route"
    assert client.get("/echo").json["error"] == "method_not_allowed"
    huge = client.post("/echo", data=b"x" * (LIMIT + 1))
    assert huge.status_code == 413
    assert huge.json == {"error": "body_too_large", "message": f"body over {LIMIT} bytes",
                         "field": "body"}
