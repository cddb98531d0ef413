"""CSV logs with a header line (Lightning's `CSVLogger` `metrics.csv`, ...): one row a record.

The first line names the columns; each later line is one record, its empty cells absent, cells
that read as numbers numbers (`nan`, `inf` included), the column names mapped by `keys.KeyMap`.
The file is followed by byte offset (`follow.LogFollower`: complete lines only). A file rewritten
whole — Lightning's `CSVLogger` does so when a new column appears — is noticed by its changed
header (or its truncation) and read again from the start, skipping the rows already applied.
A row that is not text or has more cells than the header is an `invalid_log` naming its line.
A header that holds no comma but semicolons or tabs sets the delimiter; a UTF-8 byte order mark
before it is dropped, and its cells are stripped of surrounding white space (Ultralytics pads its
`results.csv` header). A file of any name (`training.log`: Keras' `CSVLogger`) whose first line is a
comma-separated header naming a loss, epoch or step column is a CSV log (`looks_like_csv`).
"""

from __future__ import annotations

import csv
import os
import re
from typing import Any

from ..follow import READ_CHUNK_BYTES, LogFollower
from .base import BaseReader, Chunk, ReadOptions
from .keys import ALIASES, KeyMap

# The head of a file searched for its header line.
_HEAD_BYTES = 64 * 1024
_BOM = b"\xef\xbb\xbf"
# A column name of a CSV log found by its content: a name, not a line of text (no `:`, no numbers)
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_/.()\[\]@# -]{0,127}$")


def open_reader(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None = None) -> CsvReader:
    return CsvReader(path, keys, chunk_bytes or READ_CHUNK_BYTES)


def _delimiter(header: bytes) -> str:
    """`,` unless the header has none and has semicolons or tabs."""
    if b"," in header:
        return ","
    return ";" if b";" in header else "\t" if b"\t" in header else ","


def _header(path: str) -> tuple[bytes, list[str]] | None:
    """The first line of the file and its cells (None: unreadable, not text, not a CSV line)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES).removeprefix(_BOM).split(b"\n", 1)[0].rstrip(b"\r")
        return head, next(csv.reader([head.decode("utf-8")], delimiter=_delimiter(head)), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def _names_a_log(cells: list[str]) -> bool:
    names = {c.strip().lower() for c in cells}
    return bool(names & {*(n.lower() for n in ALIASES["step"]), "epoch"}) or any("loss" in n for n in names)


def is_log(path: str) -> bool:
    """A CSV whose header names a step column (or an alias of it, any case), an `epoch` column or
    a loss: a log of steps (Lightning's CSVLogger, YOLO's results.csv), not a data table."""
    got = _header(path)
    return got is not None and _names_a_log(got[1])


def looks_like_csv(path: str) -> bool:
    """A file of any name whose first line is a comma-separated header (two cells or more, not a
    JSON object) naming a loss, epoch or step column: Keras' `CSVLogger` writes `training.log`."""
    got = _header(path)
    if got is None:
        return False
    head, cells = got
    if head.lstrip().startswith((b"{", b"[")) or b"," not in head or len(cells) < 2:
        return False
    for c in cells:  # column names, not a sentence or a printed record with commas
        name = c.strip()
        if not _COLUMN.match(name) or any(isinstance(number(t), (int, float)) for t in name.split()):
            return False
    return _names_a_log(cells)


def number(text: str) -> int | float | str:
    """`"12"` → 12, `"1e-3"` → 0.001, `"nan"` → nan; other text unchanged."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


class CsvReader(BaseReader):
    """Follows a CSV log with a header line."""

    def __init__(self, path: str, keys: KeyMap, chunk_bytes: int = READ_CHUNK_BYTES) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.keys = keys
        self.chunk_bytes = chunk_bytes
        self.follower = LogFollower(path, chunk_bytes=chunk_bytes)
        self.header: list[str] | None = None
        self.header_raw = b""
        self.delimiter = ","
        self.rows = 0  # data rows applied
        self.skip = 0  # rows to pass over after a rewrite (already applied)

    def _rewritten(self) -> bool:
        if not self.header_raw:
            return False
        try:
            with open(self.path, "rb") as f:
                return f.read(len(self.header_raw) + 1) != self.header_raw + b"\n"
        except OSError:
            return False

    def poll(self) -> Chunk:
        chunk = Chunk()
        batch = self.follower.poll()
        if batch.grew and not batch.reset and self._rewritten():
            batch.reset = "rewritten"
            self.follower = LogFollower(self.path, chunk_bytes=self.chunk_bytes)
            batch = self.follower.poll()
            batch.reset = "rewritten"
        chunk.exists, chunk.grew, chunk.more = batch.exists, batch.grew, batch.more
        if batch.reset:
            self.header, self.header_raw, self.skip = None, b"", self.rows
            self.rows -= self.skip
        out = chunk.items
        if batch.too_long is not None:
            where = f"{self.name}:{batch.too_long}"
            out.append((where, f"{where}: line longer than {self.follower.max_line_bytes} bytes"))
        for lineno, line in batch.lines:
            where = f"{self.name}:{lineno}"
            raw = line[:-1] if line.endswith(b"\r") else line
            if self.header is None and lineno == 1:
                raw = raw.removeprefix(_BOM)
                self.delimiter = _delimiter(raw)
            try:
                text = raw.decode("utf-8")
                cells = next(csv.reader([text], delimiter=self.delimiter), [])
            except UnicodeDecodeError as exc:
                out.append((where, f"{where}: not text (invalid UTF-8 at byte {exc.start})"))
                continue
            except csv.Error as exc:
                out.append((where, f"{where}: not a CSV row ({exc})"))
                continue
            if self.header is None:
                if not cells or not any(cells):
                    continue  # blank lines before the header
                # the cells stripped (padded headers), the raw line as in the file: a rewrite changes it
                self.header, self.header_raw = [c.strip() for c in cells], line
                continue
            if not cells:
                continue
            if len(cells) > len(self.header):
                out.append((where, f"{where}: {len(cells)} cells, the header has {len(self.header)}"))
                continue
            if self.skip:
                self.skip -= 1
                self.rows += 1
                continue
            rec = {k: number(v) for k, v in zip(self.header, cells, strict=False) if v != ""}
            out.append((where, self.keys.canonical(rec)))
            self.rows += 1
        return chunk

    def torn(self) -> str | None:
        return f"{self.name}: the torn last line {self.follower.lineno + 1}" if self.follower.pending_bytes() else None

    def mtime(self) -> float:
        return self.follower.mtime

    def pending_bytes(self) -> int:
        return self.follower.pending_bytes()

    def state_dict(self) -> dict[str, Any]:
        return {
            "follower": self.follower.state_dict(),
            "header": self.header,
            "header_raw": self.header_raw.decode("latin-1"),
            "rows": self.rows,
            "skip": self.skip,
            "delimiter": self.delimiter,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.follower = LogFollower.from_state(state["follower"])
        self.header, self.rows, self.skip = state["header"], state["rows"], state["skip"]
        self.header_raw = state["header_raw"].encode("latin-1")
        self.delimiter = state.get("delimiter", ",")

    def close(self) -> None:
        self.follower.close()
