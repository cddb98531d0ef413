"""What an MCP tool answers: its result as a `CallToolResult` (the JSON as text, the same object as
structured content), or an error result of one line — a refusal, a run error, anything unexpected,
never a traceback, and the server keeps serving. And the bound on the strings a tool takes.
Imported by `server` alone (it needs the MCP SDK).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mcp.types import CallToolResult, TextContent

from ...errors import RunwatchError, UsageError
from .tools import Result

log = logging.getLogger("runwatch.mcp")

# An error result is one line; a message that would flood the context (a huge path) is cut.
MAX_ERROR_CHARS = 1000
# An option list (or a command) holds at most this many strings of at most this many characters:
# a real command line has a few dozen; 40,000 took the parser seconds.
MAX_OPTIONS = 256
MAX_OPTION_CHARS = 4096


def answer(tool: str, call: Callable[[], Result]) -> CallToolResult:
    """Run a tool; its result, or an error result of one line."""
    try:
        text, doc = call()
    except RunwatchError as exc:
        return error(str(exc))
    except SystemExit:  # argparse asked to exit (a help flag slipped through): not the server's end
        return error(f"{tool}: the options asked for help or a version; give options only")
    except (OverflowError, RecursionError) as exc:  # a number too large for a float, a nested bomb
        return error(f"{tool}: an argument is out of range: {exc}")
    except Exception as exc:  # noqa: BLE001 - the server must keep serving; the client gets one line
        log.error("runwatch mcp: %s failed: %s: %s", tool, type(exc).__name__, exc)
        return error(f"{tool}: internal error: {type(exc).__name__}: {exc}")
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=doc)


def error(message: str) -> CallToolResult:
    """An error result: `message` on one line, cut at MAX_ERROR_CHARS."""
    line = " ".join(message.split())  # one line, whatever the message held
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 3] + "..."
    return CallToolResult(content=[TextContent(type="text", text=line)], is_error=True)


def bounded(tool: str, values: list[str] | None, what: str = "options") -> list[str] | None:
    """`values` (an option list, a command) when within `MAX_OPTIONS` strings of `MAX_OPTION_CHARS`
    each; else a UsageError of one line naming the tool."""
    if values is None:
        return None
    if len(values) > MAX_OPTIONS:
        raise UsageError(f"{tool}: {what}: at most {MAX_OPTIONS} strings, got {len(values)}")
    for v in values:
        if isinstance(v, str) and len(v) > MAX_OPTION_CHARS:
            raise UsageError(f"{tool}: {what}: a string of at most {MAX_OPTION_CHARS} characters, got {len(v)}")
    return values
