"""Port helpers of env/launch.py: consecutive free blocks for a router and its workers."""

from __future__ import annotations

import socket

from env.launch import free_port, free_port_block


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
