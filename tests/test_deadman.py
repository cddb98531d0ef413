"""deadman.py against a real local HTTP server: when a fetch is due, one at a time, failures kept."""

from __future__ import annotations

import http.server
import threading

import pytest

from runwatch.supervising.deadman import DeadMan


class _Handler(http.server.BaseHTTPRequestHandler):
    got: list = []
    status = 200
    release: threading.Event | None = None

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).got.append(self.path)
        if self.release is not None:
            self.release.wait(30)
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    made = []

    def make(status=200, release=None):
        handler = type("H", (_Handler,), {"got": [], "status": status, "release": release})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        made.append(srv)
        return f"http://127.0.0.1:{srv.server_port}/hc", handler

    yield make
    for srv in made:
        srv.shutdown()
        srv.server_close()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_fetch_is_due_every_period_and_only_after_a_new_record(server):
    url, handler = server()
    clock = Clock()
    beat = DeadMan(url, 60.0, clock=clock)
    assert beat.poll(False) is False  # nothing arrived yet: nothing to vouch for
    assert beat.poll(True) is True
    beat.wait(10)
    assert handler.got == ["/hc"]
    clock.now += 30
    assert beat.poll(True) is False  # a record, but within the period
    clock.now += 31
    assert beat.poll(False) is True  # the record 31 s ago still counts: it arrived after the last fetch
    beat.wait(10)
    clock.now += 120
    assert beat.poll(False) is False  # no record since: a stall or a blind supervisor is not vouched for
    assert beat.fetches == 2 and len(handler.got) == 2 and beat.failures() == []


def test_one_fetch_at_a_time(server):
    release = threading.Event()
    url, handler = server(release=release)
    clock = Clock()
    beat = DeadMan(url, 1.0, clock=clock)
    assert beat.poll(True) is True
    clock.now += 5
    assert beat.poll(True) is False  # the first is still in flight
    release.set()
    beat.wait(10)
    assert beat.poll(False) is True  # the record that came meanwhile is vouched for now
    beat.wait(10)
    assert beat.fetches == 2


@pytest.mark.parametrize("status, error", [(500, "HTTP 500 Internal Server Error"), (404, "HTTP 404 Not Found")])
def test_failures_are_kept_once(server, status, error):
    url, _handler = server(status=status)
    beat = DeadMan(url, 1.0, clock=Clock())
    beat.poll(True)
    beat.wait(10)
    (failure,) = beat.failures()
    assert failure["error"] == error and failure["time"] > 0
    assert beat.failures() == []


def test_a_refused_connection_and_a_timeout_are_failures(server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once it is closed
    beat = DeadMan(f"http://127.0.0.1:{port}/x", 1.0, clock=Clock())
    beat.poll(True)
    beat.wait(20)
    (failure,) = beat.failures()
    assert "refused" in failure["error"].lower()
    release = threading.Event()
    url, _handler = server(release=release)
    slow = DeadMan(url, 1.0, timeout=0.5, clock=Clock())
    slow.poll(True)
    slow.wait(20)
    release.set()
    (failure,) = slow.failures()
    assert "timed out" in failure["error"]
