"""A free TCP port on the loopback interface, for tests that start a server of their own."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
