"""Port helpers of env/launch.py: consecutive free blocks for a router and its workers; a start
on a port another server holds is refused."""

from __future__ import annotations

import http.server
import socket
import sys
import threading

import pytest

from env.launch import LaunchError, free_port, free_port_block, start_server


def test_block_is_free_and_avoids_excluded_ports():
    base = free_port_block(4)
    for port in range(base, base + 4):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # raises if taken
    other = free_port(exclude=range(base, base + 4))
    assert other not in range(base, base + 4)
    again = free_port_block(3, exclude={base, base + 1, base + 2, base + 3})
    assert not set(range(again, again + 3)) & set(range(base, base + 4))


def test_block_skips_a_taken_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        for _ in range(20):
            base = free_port_block(3)
            assert taken not in range(base, base + 3)


def test_start_refuses_a_port_another_server_holds(tmp_path):
    """Without the check, the other server's health answer would pass for ours."""
    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    port = other.server_address[1]
    try:
        with pytest.raises(LaunchError, match=f"port {port} of 127.0.0.1 is in use"):
            start_server([sys.executable, "-c", "pass"], f"http://127.0.0.1:{port}/health",
                         tmp_path / "log.txt", timeout_s=5)
    finally:
        other.shutdown()
        other.server_close()
