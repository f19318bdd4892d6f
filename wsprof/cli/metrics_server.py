"""The HTTP server behind ``wsprof watch --serve``: prometheus_client's WSGI app and threading
server, bounded so that idle or slow clients cannot take it down.

prometheus_client's ``start_http_server`` gives every connection a thread and no read timeout:
1,026 idle connections used up the process's descriptors, ``accept`` then failed with EMFILE in
a loop at 100% of a core, ``/metrics`` stopped answering and the traces could not be opened.
Here:

- a connection that sends no complete request within :data:`READ_TIMEOUT_S` (per read) is
  closed;
- at most :data:`MAX_CONNECTIONS` are open at once; one more evicts the oldest connection that
  has not yet sent a complete request (a scraper sends its request at once, an idle client never
  does), or is closed at once when all are busy answering;
- ``accept`` failing for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) backs
  off (:data:`ACCEPT_BACKOFF_S`, doubling to :data:`MAX_ACCEPT_BACKOFF_S`) instead of spinning.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from wsprof.report.openmetrics import registry_for

#: Seconds a connection may stay silent on one read (request line, a header) or one write
#: before it is closed. A scraper sends its request at once; Prometheus' default scrape
#: timeout is 10 s.
READ_TIMEOUT_S = 5.0
#: Connections open at once; past it the oldest one still waiting for its request is closed.
MAX_CONNECTIONS = 64
#: Listen backlog: connections the kernel completes while the server thread accepts.
LISTEN_BACKLOG = 128
#: First pause after ``accept`` fails for want of resources; doubled up to the maximum.
ACCEPT_BACKOFF_S = 0.05
MAX_ACCEPT_BACKOFF_S = 1.0
#: ``accept`` errors that mean "out of descriptors or memory": retrying at once cannot work.
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class _Handler(WSGIRequestHandler):
    """A request handler with a read timeout, silent (a scrape is no news), that tells the
    server once its request has been read."""

    timeout = READ_TIMEOUT_S

    def parse_request(self) -> bool:
        ok = super().parse_request()  # the request line and every header read
        server = self.server
        if isinstance(server, BoundedServer):
            server.mark_busy(self.request)
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing (prometheus_client's handler does the same)."""


class BoundedServer(ThreadingWSGIServer):
    """prometheus_client's thread-per-connection WSGI server with a read timeout, a cap on
    open connections and a back-off on ``accept`` failing for want of resources."""

    request_queue_size = LISTEN_BACKLOG
    max_connections = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lock = threading.Lock()
        #: Open connections, oldest first; True once its request has been read.
        self._open: dict[socket.socket, bool] = {}
        self._backoff_s = 0.0
        super().__init__(*args, **kwargs)

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            request = super().get_request()
        except OSError as e:
            if e.errno in _RESOURCE_ERRNOS:
                # Out of descriptors: free the idle ones, then wait before the next try (the
                # listening socket stays readable, so retrying at once spins a core).
                self._evict_idle(all_of_them=True)
                self._backoff_s = min(
                    max(self._backoff_s * 2, ACCEPT_BACKOFF_S), MAX_ACCEPT_BACKOFF_S
                )
                time.sleep(self._backoff_s)
            raise  # socketserver drops this accept and selects again
        self._backoff_s = 0.0
        return request

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            if len(self._open) >= self.max_connections and not self._evict_oldest_idle():
                refuse = True
            else:
                refuse = False
                self._open[request] = False
        if refuse:  # every slot is answering a request: this one is closed at once
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out, was evicted or hung up: nothing to report (the default
        prints a traceback on watch's stderr)."""

    def mark_busy(self, request: socket.socket) -> None:
        """``request`` has sent its request: it is answered, never evicted."""
        with self._lock:
            if request in self._open:
                self._open[request] = True

    def _evict_oldest_idle(self) -> bool:
        """Close the oldest connection still waiting for its request (lock held)."""
        victim = next((s for s, busy in self._open.items() if not busy), None)
        if victim is None:
            return False
        del self._open[victim]
        with contextlib.suppress(OSError):
            victim.shutdown(socket.SHUT_RDWR)  # its thread's read returns at once and ends
        return True

    def _evict_idle(self, all_of_them: bool) -> None:
        with self._lock:
            while self._evict_oldest_idle() and all_of_them:
                pass


def start_metrics_server(host: str, port: int, collector: Any) -> BoundedServer:
    """Serve ``collector`` at ``http://host:port/metrics`` from a daemon thread (an
    OpenMetrics scraper gets OpenMetrics, others the Prometheus text format).

    Args:
        host: address to bind (IPv4 or IPv6 literal, or a name of this host).
        port: port to bind; 0 picks a free one (``server.server_address`` says which).
        collector: a prometheus_client collector (:class:`~wsprof.report.openmetrics.
            SnapshotCollector`).

    Returns:
        The running server.

    Raises:
        OSError: the address cannot be bound (``socket.gaierror`` for an unknown name).
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]

    class Server(BoundedServer):
        address_family = family

    httpd = make_server(
        str(sockaddr[0]),
        port,
        make_wsgi_app(registry_for(collector)),
        Server,
        handler_class=_Handler,
    )
    threading.Thread(target=httpd.serve_forever, name="wsprof-metrics", daemon=True).start()
    return httpd
