"""Notifications of the supervisor's actions through Apprise URLs, and URLs shown without secrets.

    n = Notifier(["json://127.0.0.1:8080/hook", "ntfy://topic"])   # UsageError when unusable
    failures = n.send("runwatch: relaunch runs/a", body)             # [{"url": masked, "error": ...}]

Apprise (`pip install 'runwatch[notify]'`) is imported only when a Notifier is made. A notification
that fails is returned as a failure (never raised): supervision goes on. `mask_url` shows a URL
with its credentials replaced by `***` (user:password@, token-like host names, path segments
and query values), for logs and `supervise.jsonl`. Standard library only, Apprise aside.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict
from urllib.parse import urlsplit

from ..errors import UsageError

INSTALL_HINT = "pip install 'runwatch[notify]'"
# A path segment kept as written: a short lower-case word (`hooks`, `api`, `path`); anything else may
# be a token (Slack's, Telegram's, a webhook id) and is shown as ***.
_PLAIN_SEGMENT = re.compile(r"^[a-z][a-z_-]{0,15}$")
# A host kept as written: a dotted name or address, `localhost`, an IPv6 literal.
_PLAIN_HOST = re.compile(r"^(localhost|\[[0-9a-fA-F:.]+\]|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+)$")


def mask_url(url: str) -> str:
    """`url` with anything that may be a secret replaced by `***`:

    `json://user:pw@host:8080/hook/abc123?token=x` → `json://***@host:8080/hook/***?token=***`.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    if not parts.scheme:
        return "***"
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    host, colon, port = hostport.rpartition(":") if not hostport.endswith("]") else (hostport, "", "")
    if not colon or not port.isdigit():
        host, colon, port = hostport, "", ""
    shown_host = host if _PLAIN_HOST.match(host or "") else ("***" if host else "")
    out = f"{parts.scheme}://" + ("***@" if at else "") + shown_host + (f":{port}" if colon else "")
    segments = parts.path.split("/")
    out += "/".join(s if not s or _PLAIN_SEGMENT.match(s) else "***" for s in segments)
    if parts.query:
        pairs = []
        for item in parts.query.split("&"):
            key, eq, _ = item.partition("=")
            pairs.append(f"{key}=***" if eq else "***")
        out += "?" + "&".join(pairs)
    if parts.fragment:
        out += "#***"
    return out


class Failure(TypedDict):
    """A notification that was not sent: the URL (masked) and why."""

    url: str
    error: str


class Notifier:
    """Sends one message to each URL; checks the URLs when made (UsageError naming a bad one)."""

    def __init__(self, urls: tuple[str, ...] | list[str]) -> None:
        self.urls = list(urls)
        self._apprise: Any = None
        if not self.urls:
            return
        try:
            import apprise
        except ImportError:
            raise UsageError(f"supervise --notify needs Apprise: {INSTALL_HINT}") from None
        self._apprise = apprise
        for url in self.urls:
            if apprise.Apprise.instantiate(url) is None:
                raise UsageError(f"supervise: --notify {mask_url(url)}: not a notification URL Apprise knows")

    def send(self, title: str, body: str) -> list[Failure]:
        """Notify every URL; the failures as `[{"url": masked, "error": text}]` (empty: all sent)."""
        if not self.urls:
            return []
        import logging

        apprise = self._apprise
        failures: list[Failure] = []
        for url in self.urls:
            note = "the notification service did not accept it"
            try:
                with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:
                    sender = apprise.Apprise()
                    sender.add(url)
                    ok = sender.notify(body=body, title=title)
                text = [line for line in captured.getvalue().splitlines() if line.strip()]
                if text:
                    note = text[-1].strip()
            except Exception as exc:  # noqa: BLE001 - a notifier's failure must never end the supervision
                ok, note = False, f"{type(exc).__name__}: {exc}"
            if not ok:
                failures.append({"url": mask_url(url), "error": _scrub(note, url)[:300]})
        return failures


def _scrub(text: str, url: str) -> str:
    """An error text without the URL's secrets (Apprise sometimes quotes the URL it failed on)."""
    parts = urlsplit(url)
    secrets = [parts.password, parts.username] + [s for s in parts.path.split("/") if s and not _PLAIN_SEGMENT.match(s)]
    if parts.query:
        secrets += [item.partition("=")[2] for item in parts.query.split("&")]
    if not _PLAIN_HOST.match(parts.hostname or ""):
        secrets.append(parts.hostname)
    for s in secrets:
        if s and len(s) >= 3:
            text = text.replace(s, "***")
    return text
