"""A free loopback port (for a gloo rendezvous): kept apart from the demo's runner so that
code which only needs a port imports neither the demo workload nor py-spy."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for the gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
