"""`runwatch serve DIR`: every run under DIR at a glance, in a browser, updating by itself.

    runwatch serve runs/                 # http://127.0.0.1:8765/
    runwatch serve runs/ --port 0        # a free port; the URL is printed

`/` lists the runs (trouble first), `/run/<path>` shows one with its charts, findings, status
lines and supervision; `/api/runs` and `/api/run/<path>` are the same facts as JSON. Read-only,
standard library only (`http.server`), no file from the network: see docs/SERVE.md.

    folder.py       which paths are runs, and finding them under the folder
    runs.py         reading each run incrementally (source, rules, status facts, chart series)
    series.py       a chart's series, downsampled to at most 1000 points, spikes kept
    bests.py        best eval loss, best task metric, goodput so far, recipe and provenance
    supervision.py  the supervisor's journal (supervise.jsonl)
    server.py       the catalog's reader thread, the HTTP handler, the pages
    static/         app.js and style.css, shipped as package data
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ...errors import UsageError

if TYPE_CHECKING:  # the server (http.server and the readers) loads only when `serve` runs
    from .server import Server


DEFAULT_HOST = "127.0.0.1"  # this machine only; reach it from elsewhere through an SSH tunnel
DEFAULT_PORT = 8765


def host_warning(host: str) -> str | None:
    """The warning printed when the server listens beyond this machine, else None."""
    from .server import is_loopback

    if is_loopback(host):
        return None
    return (
        f"WARNING: runwatch serve listens on {host}: anyone who can reach this machine can read every run "
        "under the folder (no password, no TLS). The default, 127.0.0.1 with an SSH tunnel "
        "(ssh -L 8765:127.0.0.1:8765 HOST), keeps it private."
    )


def serve(root: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, verbose: bool = False) -> Server:
    """A started server over `root` (its reader thread running); call `serve_forever()` on it."""
    from .server import Server

    if not os.path.isdir(root):
        raise UsageError(f"serve: {root}: no such folder")
    if type(port) is not int or not 0 <= port <= 65535:
        raise UsageError(f"serve.port must be an int in [0, 65535], got {port!r}")
    try:
        server = Server(root, host, port, verbose=verbose)
    except OSError as exc:
        raise UsageError(f"serve: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    server.catalog.start()
    return server


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "root",
        metavar="DIR",
        help="the folder of runs (run directories, JSONL logs, trainer_state.json; 4 levels down)",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}, this machine only; another one warns)",
    )
    p.add_argument("--verbose", action="store_true", help="log each request to stderr")


def run(args: argparse.Namespace) -> int:
    warning = host_warning(args.host)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    server = serve(args.root, args.host, args.port, verbose=args.verbose)
    n = len(server.catalog.views())
    print(f"runwatch serve: {n} run{'s' if n != 1 else ''} under {server.catalog.root} at {server.url}", flush=True)
    print("(read-only; Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("runwatch serve: stopped", file=sys.stderr)
    finally:
        server.catalog.stop()
        server.server_close()
    return 0
