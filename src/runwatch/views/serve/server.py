"""The HTTP side of `runwatch serve`: the catalog of runs, its reader thread, the pages and the API.

    server = Server("/runs", "127.0.0.1", 0)     # binds; finds the runs under /runs
    server.catalog.start()                       # one thread reads every run's new bytes
    server.serve_forever()                       # GET /, /run/<path>, /compare?run=..., /api/...

Request threads never read a log for a page: they take the facts the reader thread has gathered
so far (under the run's lock, held for at most one slice of records), so a FIFO, a 2 GB line or a
100 GB log cannot hold a page. The one exception is the CSV export (`/api/run/<path>.csv`), which
streams the whole log in its own request's thread (at most `MAX_EXPORTS` at a time). Only GET and
HEAD exist; the paths served are the catalog's keys, so anything else (`..`, an encoded `%2e%2e`,
a symlink leading out of the folder) is a 404. Standard library only.
"""

from __future__ import annotations

import html
import ipaddress
import json
import math
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ...errors import InvalidRunError
from ...files import SIDE_FILES, escaping
from .export import csv_chunks
from .folder import find_runs
from .runs import RunDetail, RunSummary, RunView

# How often the folder is listed again for new runs, and how long the reader idles when every
# run is caught up (a page polls every 2 s; half a second keeps it at most one poll behind).
RESCAN_SECONDS = 5.0
IDLE_POLL_SECONDS = 0.5
# The shipped files (package data), by URL.
STATIC_FILES = {
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/chart.js": ("chart.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
# Nothing from elsewhere: no CDN, no inline script, no framing by another site.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
# Sort order of the list: trouble first.
_ORDER = {"anomaly": 0, "error": 1, "stale": 2, "watching": 3, "none": 4, "ok": 5}
# Runs drawn on one compare page: beyond this the charts are a tangle (and the colours repeat).
MAX_COMPARE = 50
# CSV exports read whole logs in request threads: at most this many at once, the others wait.
MAX_EXPORTS = 2
# ... and one a client; a request waits at most this long for a slot (then 503) ...
MAX_EXPORTS_PER_CLIENT = 1
EXPORT_WAIT_SECONDS = 10.0
# ... a client that does not take a chunk within this is cut off, and so is an export past the last.
EXPORT_SEND_SECONDS = 30.0
EXPORT_SECONDS = 600.0


def is_loopback(host: str) -> bool:
    """`host` only accepts connections from this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Catalog:
    """Every run under `root`, refreshed by one reader thread (`start()`)."""

    def __init__(
        self, root: str, *, rescan_seconds: float = RESCAN_SECONDS, idle_seconds: float = IDLE_POLL_SECONDS
    ) -> None:
        self.root = os.path.realpath(root)
        self.rescan_seconds = rescan_seconds
        self.idle_seconds = idle_seconds
        self._runs: dict[str, RunView] = {}
        self._lock = threading.Lock()  # guards the mapping, not the runs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0  # reader passes over every run so far
        self.refused: list[str] = []  # the runs not read, and why (a side file leading out of the folder)
        self.scan()

    def scan(self) -> None:
        """List the folder again: add new runs, drop those gone."""
        found = dict(find_runs(self.root))
        refused = []
        for rel, target in list(found.items()):  # every file a run's view opens stays inside the folder
            out = escaping(self.root, target.run_dir, SIDE_FILES)
            if out is not None:
                refused.append(f"{rel}: {out} leads outside {self.root}: not read")
                del found[rel]
        self.refused = refused
        with self._lock:
            for rel in [r for r in self._runs if r not in found]:
                del self._runs[rel]
            for rel, target in found.items():
                view = self._runs.get(rel)
                if view is None or view.target != target:  # new, or now read another way
                    self._runs[rel] = RunView(rel, target)

    def views(self) -> list[RunView]:
        with self._lock:
            return list(self._runs.values())

    def get(self, rel: str) -> RunView | None:
        with self._lock:
            return self._runs.get(rel)

    def refresh(self) -> bool:
        """One pass: every run reads what is new (a bounded amount each); True if more is waiting."""
        more = False
        for view in self.views():
            if self._stop.is_set():
                break
            more = view.refresh() or more  # takes the run's lock by itself, a slice at a time
        self.passes += 1
        return more

    def _loop(self) -> None:
        next_scan = time.monotonic() + self.rescan_seconds
        while not self._stop.is_set():
            if time.monotonic() >= next_scan:
                self.scan()
                next_scan = time.monotonic() + self.rescan_seconds
            if not self.refresh():
                self._stop.wait(self.idle_seconds)

    def start(self) -> None:
        """Start the reader thread (a daemon: it never keeps the process alive)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="runwatch-serve-reader", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def summaries(self, now: float | None = None) -> list[RunSummary]:
        """Every run's summary, trouble first, then by path."""
        now = time.time() if now is None else now
        out = []
        for view in self.views():
            with view.lock:
                out.append(view.summary(now))

        def key(s: RunSummary) -> tuple[int, str]:
            state = s["verdict"]["state"]
            if state != "anomaly" and (s["error"] or s["findings"] > s["warnings"]):  # a warning never moves a run up
                state = "error"
            return (_ORDER.get(state, 9), s["path"])

        return sorted(out, key=key)

    def compare(self, names: list[str]) -> dict[str, Any]:
        """The details of the runs named (in that order, each once) and the names not found."""
        runs: list[RunDetail] = []
        missing: list[str] = []
        for rel in dict.fromkeys(names):
            view = self.get(rel) if len(runs) < MAX_COMPARE else None
            if view is None:
                missing.append(rel)
                continue
            with view.lock:
                runs.append(view.detail())
        return {"root": self.root, "runs": runs, "missing": missing, "limit": MAX_COMPARE}


def _strict(obj: Any) -> Any:
    """`obj` with every non-finite float as text (strict JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def to_json(obj: Any) -> bytes:
    try:
        text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    except ValueError:  # a NaN from a side file (watchdog.json, supervise.jsonl written by hand)
        text = json.dumps(_strict(obj), allow_nan=False, separators=(",", ":"))
    return text.encode()


def page(kind: str, title: str, api: str, data: Any) -> bytes:
    """An HTML page: a shell, its first facts as a JSON data block, and the shipped script that
    draws them and polls `api` for more. No user text is written into the HTML itself."""
    blob = to_json({"page": kind, "api": api, "data": data}).decode()
    # In a <script> data block only "</script" could end it early: escape every "<" (and > &).
    blob = blob.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{html.escape(title)}</title><link rel="stylesheet" href="/static/style.css"></head>\n'
        f'<body class="page-{kind}"><header id="top"><a class="brand" href="/">runwatch</a>'
        '<span id="live" class="live">loading</span></header>\n<main id="app"></main>\n'
        f'<script id="initial" type="application/json">{blob}</script>\n'
        '<script src="/static/chart.js"></script><script src="/static/app.js"></script>\n</body></html>\n'
    ).encode()


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD of the pages, the API and the shipped files; nothing else."""

    server: Server
    protocol_version = "HTTP/1.1"  # keep-alive: a page polls the API every few seconds
    server_version = "runwatch-serve"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _send(self, code: int, body: bytes, ctype: str, head: bool, cache: str = "no-store") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _not_found(self, head: bool, what: str = "not found") -> None:
        self._send(404, f"404 {what}\n".encode(), "text/plain; charset=utf-8", head)

    def _host_ok(self) -> bool:
        """Bound to loopback: only a loopback Host header (a web page that rebinds its own name
        to 127.0.0.1 must not read the runs)."""
        if not self.server.loopback:
            return True
        host = (self.headers.get("Host") or "").strip()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return is_loopback(name)

    def _view(self, rest: str) -> RunView | None:
        try:
            rel = unquote(rest, errors="strict")
        except UnicodeDecodeError:
            return None
        if "\x00" in rel or any(part in ("", ".", "..") for part in rel.split("/")):
            return None  # never a catalog key; said here too so that the rule is visible
        return self.server.catalog.get(rel)

    def _answer(self, head: bool) -> None:
        if not self._host_ok():
            self._send(403, b"403 this server answers only to a loopback Host\n", "text/plain; charset=utf-8", head)
            return
        path = urlsplit(self.path).path
        catalog = self.server.catalog
        if path == "/":
            runs = catalog.summaries()
            self._send(
                200,
                page("list", "runwatch", "/api/runs", {"root": catalog.root, "runs": runs}),
                "text/html; charset=utf-8",
                head,
            )
        elif path == "/api/runs":
            doc = {"root": catalog.root, "runs": catalog.summaries(), "refused": catalog.refused}
            self._send(200, to_json(doc), "application/json", head)
        elif path in ("/compare", "/api/compare"):
            query = urlsplit(self.path).query
            names = [n for n in parse_qs(query, keep_blank_values=False).get("run", []) if n]
            data = catalog.compare(names)
            if path == "/api/compare":
                self._send(200, to_json(data), "application/json", head)
            else:
                title = f"runwatch · compare {len(names)} run{'s' if len(names) != 1 else ''}"
                self._send(200, page("compare", title, "/api/compare?" + query, data), "text/html; charset=utf-8", head)
        elif path.startswith("/run/") or path.startswith("/api/run/"):
            api = path.startswith("/api/")
            rest = path[len("/api/run/" if api else "/run/") :]
            view = self._view(rest)
            if view is None and api and rest.endswith(".csv"):  # a run's own path wins over its export
                export = self._view(rest[: -len(".csv")])
                if export is not None:
                    self._export(export, head)
                    return
            if view is None:
                self._not_found(head, "no such run")
                return
            with view.lock:
                detail = view.detail()
            if api:
                self._send(200, to_json(detail), "application/json", head)
            else:
                url = "/api/run/" + quote(view.rel, safe="/")
                self._send(200, page("run", f"runwatch · {view.rel}", url, detail), "text/html; charset=utf-8", head)
        elif path in STATIC_FILES:
            name, ctype = STATIC_FILES[path]
            self._send(200, self.server.static[name], ctype, head, cache="no-cache")
        else:
            self._not_found(head)

    def _export(self, view: RunView, head: bool) -> None:
        """The run's CSV, streamed (chunked) from its log as `export.csv_chunks` reads it; at most
        `MAX_EXPORTS` at once and one a client (503 and 429 after `EXPORT_WAIT_SECONDS`: a client
        that never reads holds no slot for long), each written within `EXPORT_SEND_SECONDS` a chunk and
        `EXPORT_SECONDS` in all, else cut."""
        client = self.client_address[0] if isinstance(self.client_address, tuple) else str(self.client_address)
        if not self.server.exporting(client, +1):
            self._send(429, b"429 one CSV export at a time per client\n", "text/plain; charset=utf-8", head)
            return
        try:
            if not self.server.exports.acquire(timeout=EXPORT_WAIT_SECONDS):
                self._send(503, b"503 every CSV export slot is busy; try again\n", "text/plain; charset=utf-8", head)
                return
            try:
                self.connection.settimeout(EXPORT_SEND_SECONDS)
                self._stream_csv(view, head)
            finally:
                self.server.exports.release()
        finally:
            self.server.exporting(client, -1)

    def _stream_csv(self, view: RunView, head: bool) -> None:
        try:
            chunks = csv_chunks(view.target, view.opts.maps)  # the first pass: columns and cuts
        except (InvalidRunError, OSError) as exc:
            text = f"422 {view.rel}: cannot export: {getattr(exc, 'strerror', None) or exc}\n"
            self._send(422, text.encode(), "text/plain; charset=utf-8", head)
            return
        name = (view.rel.rstrip("/").rsplit("/", 1)[-1] or "run") + ".csv"
        self.send_response(200)
        self.send_header("Content-Type", "text/csv; charset=utf-8")
        self.send_header("Content-Disposition", f"attachment; filename*=UTF-8''{quote(name)}")
        self.send_header("Cache-Control", "no-store")
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if head:
            return
        end = time.monotonic() + EXPORT_SECONDS
        try:
            for chunk in chunks:
                if time.monotonic() > end:
                    raise TimeoutError(f"the export took longer than {EXPORT_SECONDS:g} s")
                if chunk:  # an empty chunk would end the body
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except (InvalidRunError, OSError):
            self.close_connection = True  # no final chunk: the client sees a cut transfer, not a short CSV


class Server(ThreadingHTTPServer):
    """The web server over `root`: binds at construction; `catalog.start()` then `serve_forever()`."""

    daemon_threads = True

    def __init__(
        self,
        root: str,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        verbose: bool = False,
        catalog: Catalog | None = None,
    ) -> None:
        if ":" in host.strip("[]"):
            self.address_family = socket.AF_INET6
        self.catalog = catalog or Catalog(root)
        self.loopback = is_loopback(host)
        self.verbose = verbose
        self.exports = threading.BoundedSemaphore(MAX_EXPORTS)
        self._exporting: dict[str, int] = {}  # exports under way, by client address
        self._exporting_lock = threading.Condition()
        files = resources.files("runwatch.views.serve") / "static"
        self.static = {name: (files / name).read_bytes() for name, _ in STATIC_FILES.values()}
        super().__init__((host.strip("[]"), port), Handler)

    def exporting(self, client: str, delta: int) -> bool:
        """Count an export of `client` in (+1: waiting up to `EXPORT_WAIT_SECONDS` while it has
        `MAX_EXPORTS_PER_CLIENT` already, then False) or out (-1)."""
        with self._exporting_lock:
            if delta > 0 and not self._exporting_lock.wait_for(
                lambda: self._exporting.get(client, 0) < MAX_EXPORTS_PER_CLIENT, timeout=EXPORT_WAIT_SECONDS
            ):
                return False
            n = self._exporting.get(client, 0) + delta
            if n > 0:
                self._exporting[client] = n
            else:
                self._exporting.pop(client, None)
            self._exporting_lock.notify_all()
            return True

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def close(self) -> None:
        """Stop serving and reading (from another thread than `serve_forever`'s)."""
        self.shutdown()
        self.catalog.stop()
        self.server_close()
