"""A tiny Flask app served by `env.http_server` as its own process, for the scaffold's tests.

    python -m tests.fakes.http_app --port N [--headers-timeout S] [--request-timeout S]
                                   [--open-files N]

`/health`; `/echo` (POST: the JSON object back, at most `MAX_BODY` bytes); `/slow?s=X` (answers
after X seconds: a request in flight). The deadlines can be shortened so tests stay fast, and the
open-file limit (soft and hard) lowered, as a machine may have it. Request heads are limited to
`MAX_HEADER_BYTES` (waitress answers 431 over it).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import time

from flask import Flask, Response, jsonify, request

from env import http_server
from env.wire import install_error_handlers, read_json_object

MAX_BODY = 4096
MAX_HEADER_BYTES = 1024  # small, so that a request over it is read whole in one recv


def create_app() -> Flask:
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    install_error_handlers(app)

    @app.get("/health")
    def health() -> Response:
        return jsonify(status="ok", pid=os.getpid())

    @app.post("/echo")
    def echo() -> Response:
        return jsonify(read_json_object())

    @app.get("/slow")
    def slow() -> Response:
        seconds = float(request.args.get("s", "1"))
        time.sleep(seconds)
        return jsonify(slept=seconds)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--headers-timeout", type=float, default=http_server.HEADERS_TIMEOUT_S)
    parser.add_argument("--request-timeout", type=float, default=http_server.REQUEST_TIMEOUT_S)
    parser.add_argument("--open-files", type=int, default=0, help="open-file limit; 0: as is")
    args = parser.parse_args()
    if args.open_files:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.open_files, args.open_files))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    http_server.HEADERS_TIMEOUT_S = args.headers_timeout
    http_server.REQUEST_TIMEOUT_S = args.request_timeout
    http_server.make_server(create_app(), host="127.0.0.1", port=args.port, threads=args.threads,
                            max_body_bytes=MAX_BODY, ident="fake",
                            max_request_header_size=MAX_HEADER_BYTES).serve()


if __name__ == "__main__":
    main()
