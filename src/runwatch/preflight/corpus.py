"""Reading and writing the rows of a corpus, streaming: JSONL, CSV, Parquet, or a directory of one of them.

Used by `runwatch audit-data` and `runwatch subsample`. A corpus is read one row at a time (Parquet: one record batch at a
time), so memory does not grow with its size. Each row comes out as a `Row`: its id, where it came
from, the text to check, a read error (a row that cannot even be read is rejected, never dropped),
and the format's own payload from which the raw and normalized variants are written.

Ids: `--id-field NAME` takes them from that column (a row without it is rejected). Without it, a
column named `id` is used where a row has one; otherwise one is made: the row's 0-based number in
the corpus (blank JSONL lines are not rows), written as a first column `id`. `make_ids=False`
(subsample) numbers such rows the same way but adds no column. `field=None` reads whole rows only.

JSONL, CSV and the audit's own files need only the standard library; Parquet needs pyarrow
(extra: data), imported when a Parquet file is read or written.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any, NamedTuple, Protocol

from ..errors import DataError
from ..files import orjson_misread

_orjson: ModuleType | None
try:  # optional fast path (extra: fast), ~3x faster; what it rejects goes to the standard library
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


def _loads(line: str) -> Any:
    """json.loads, through orjson when it is importable, with identical results either way: what
    orjson refuses (NaN, lone surrogates) or might read differently (long integers) goes to json."""
    if _orjson is not None:
        try:
            value = _orjson.loads(line)
        except ValueError:
            pass
        else:
            if not orjson_misread(line, value):
                return value
    return json.loads(line)


FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
# Rows of one Parquet record batch read or written at once: ~1-10 MB for code snippets.
PARQUET_BATCH_ROWS = 4096
# csv refuses fields over 128 kB by default; a source file in one cell can be much larger.
CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


class Row(NamedTuple):
    """One row: `error` is (reason, message) when the row could not be read, else None.

    `id` is a JSON value (or a CSV cell, or the row's number); `payload` is the format's own: a
    JSONL row's (line, object, made id), a CSV row's fields, a Parquet row's dict.
    """

    id: Any
    where: str
    text: str | None
    error: tuple[str, str] | None
    payload: Any


def _list_files(path: str) -> tuple[str, list[str]]:
    if os.path.isdir(path):
        names = sorted(
            n
            for n in os.listdir(path)
            if os.path.splitext(n)[1].lower() in FORMATS and os.path.isfile(os.path.join(path, n))
        )
        if not names:
            raise DataError(f"{path}: a directory without .jsonl, .csv or .parquet files")
        kinds = {FORMATS[os.path.splitext(n)[1].lower()] for n in names}
        if len(kinds) > 1:
            raise DataError(f"{path}: mixes formats ({', '.join(sorted(kinds))}); audit one format at a time")
        return kinds.pop(), [os.path.join(path, n) for n in names]
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file or directory")
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise DataError(f"{path}: unknown format {ext or '(no extension)'!r}; expected .jsonl, .csv or .parquet")
    return FORMATS[ext], [path]


class Corpus:
    """The rows of `path` (a file or a directory of files of one format), read lazily."""

    def __init__(self, path: str, field: str | None, id_field: str | None = None, *, make_ids: bool = True) -> None:
        self.path = path
        self.field = field
        self.id_field = id_field
        self.make_ids = make_ids
        self.format, self.files = _list_files(path)
        self.header: list[str] | None = None  # CSV: the output header
        self.schema: Any = None  # Parquet: the output schema
        self.made_ids = False
        self.blank_lines = 0  # JSONL/CSV lines that hold nothing: not rows, counted in the audit
        if self.format == "csv":
            self._inspect_csv()
        elif self.format == "parquet":
            self._inspect_parquet()

    @property
    def ext(self) -> str:
        return self.format

    def _inspect_csv(self) -> None:
        csv.field_size_limit(CSV_FIELD_LIMIT)
        first = _csv_header(self.files[0])
        for name in self.files[1:]:
            header = _csv_header(name)
            if header != first:
                raise DataError(f"{name}: CSV header {header} differs from {self.files[0]}'s {first}")
        if self.field is not None and self.field not in first:
            raise DataError(f"{self.files[0]}: no column {self.field!r} (columns: {', '.join(first)})")
        if self.id_field is not None and self.id_field not in first:
            raise DataError(f"{self.files[0]}: no id column {self.id_field!r} (columns: {', '.join(first)})")
        self.made_ids = self.make_ids and self.id_field is None and "id" not in first
        self.header = (["id"] if self.made_ids else []) + first

    def _inspect_parquet(self) -> None:
        pq = _pyarrow_parquet()
        first = None
        for name in self.files:
            try:
                schema = pq.read_schema(name)
            except Exception as exc:  # ArrowInvalid, OSError: not a Parquet file
                raise DataError(f"{name}: not a readable Parquet file: {exc}") from None
            if first is None:
                first = schema
            elif not schema.equals(first):
                raise DataError(f"{name}: Parquet schema differs from {self.files[0]}'s")
        assert first is not None  # _list_files never returns an empty list
        if self.field is not None and self.field not in first.names:
            raise DataError(f"{self.files[0]}: no column {self.field!r} (columns: {', '.join(first.names)})")
        if self.id_field is not None and self.id_field not in first.names:
            raise DataError(f"{self.files[0]}: no id column {self.id_field!r} (columns: {', '.join(first.names)})")
        self.made_ids = self.make_ids and self.id_field is None and "id" not in first.names
        if self.made_ids:
            import pyarrow as pa

            first = first.insert(0, pa.field("id", pa.int64()))
        self.schema = first

    def rows(self) -> Iterator[Row]:
        """Every row in order, files in name order."""
        reader = {"jsonl": self._jsonl_rows, "csv": self._csv_rows, "parquet": self._parquet_rows}[self.format]
        number = 0
        for name in self.files:
            for row in reader(name, number):
                number += 1
                yield row

    # --- per format ------------------------------------------------------------------------

    def _text(self, value: Any) -> tuple[str | None, tuple[str, str] | None]:
        if type(value) is str or self.field is None:
            return value, None
        return None, ("not_text", f"{self.field} is {type(value).__name__}, not a string")

    def _jsonl_rows(self, name: str, number: int) -> Iterator[Row]:
        base = os.path.basename(name)
        id_key = self.id_field or "id"
        with open(name, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                where = f"{base}:{lineno}"
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    yield Row(number, where, None, ("invalid_utf8", f"invalid UTF-8 at byte {exc.start}"), None)
                    number += 1
                    continue
                if not line.strip():
                    self.blank_lines += 1
                    continue
                try:
                    obj = _loads(line)
                except (ValueError, RecursionError) as exc:
                    yield Row(number, where, None, ("malformed_json", str(exc)), None)
                    number += 1
                    continue
                if type(obj) is not dict:
                    yield Row(
                        number,
                        where,
                        None,
                        ("not_object", f"a row must be a JSON object, got {type(obj).__name__}"),
                        None,
                    )
                    number += 1
                    continue
                if id_key in obj:
                    rid, made = obj[id_key], False
                elif self.id_field is not None:
                    yield Row(number, where, None, ("missing_id", f"no id field {self.id_field!r}"), None)
                    number += 1
                    continue
                else:
                    rid, made = number, self.make_ids
                    self.made_ids = self.made_ids or made
                if self.field is None:
                    text, error = None, None
                elif self.field not in obj:
                    text, error = None, ("missing_field", f"no field {self.field!r}")
                else:
                    text, error = self._text(obj[self.field])
                yield Row(rid, where, text, error, (line, obj, made))
                number += 1

    def _csv_rows(self, name: str, number: int) -> Iterator[Row]:
        base = os.path.basename(name)
        assert self.header is not None  # set by _inspect_csv
        header = self.header[1:] if self.made_ids else self.header
        col = header.index(self.field) if self.field is not None else None
        id_key = self.id_field or "id"
        id_col = header.index(id_key) if not self.made_ids and id_key in header else None
        # surrogateescape: an invalid byte must not stop the reading; the row holding it is rejected below
        with open(name, newline="", encoding="utf-8-sig", errors="surrogateescape") as f:
            reader = csv.reader(f)
            next(reader)  # the header, checked in _inspect_csv
            while True:
                where = f"{base}:{reader.line_num + 1}"
                try:
                    fields = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    yield Row(number, where, None, ("csv_error", str(exc)), None)
                    number += 1
                    continue
                if not fields:  # csv yields [] for a blank line
                    self.blank_lines += 1
                    continue
                try:
                    "".join(fields).encode("utf-8")
                except UnicodeEncodeError as exc:
                    yield Row(number, where, None, ("invalid_utf8", f"invalid UTF-8 at character {exc.start}"), None)
                    number += 1
                    continue
                if len(fields) != len(header):
                    yield Row(
                        number, where, None, ("field_count", f"{len(fields)} fields, header has {len(header)}"), None
                    )
                    number += 1
                    continue
                text = fields[col] if col is not None else None
                rid: int | str
                if self.made_ids:
                    rid, fields = number, [str(number), *fields]
                else:
                    rid = fields[id_col] if id_col is not None else number
                yield Row(rid, where, text, None, fields)
                number += 1

    def _parquet_rows(self, name: str, number: int) -> Iterator[Row]:
        pq = _pyarrow_parquet()
        base = os.path.basename(name)
        id_key = self.id_field or "id"
        try:
            pf = pq.ParquetFile(name)
            batches = pf.iter_batches(batch_size=PARQUET_BATCH_ROWS)
            index = 0
            for batch in batches:
                for obj in batch.to_pylist():
                    where = f"{base}:row {index}"
                    index += 1
                    if self.made_ids:
                        obj = {"id": number, **obj}
                    rid = obj.get(id_key, number)
                    text, error = self._text(obj[self.field] if self.field is not None else None)
                    yield Row(rid, where, text, error, obj)
                    number += 1
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid/ArrowIOError are these
            raise DataError(f"{name}: cannot read Parquet: {exc}") from None

    # --- the variants written ----------------------------------------------------------------

    def raw_item(self, row: Row) -> Any:
        """What the raw variant holds for a kept row (the row as read, with its id)."""
        if self.format == "jsonl":
            line, obj, made = row.payload
            if not made:
                return line
            # the line as read, with the made id spliced in first (no re-serialization of the row)
            rest = line.lstrip()[1:]
            return f'{{"id": {row.id}, {rest}' if obj else f'{{"id": {row.id}}}'
        return row.payload

    def normalized_item(self, row: Row, text: str) -> Any:
        """The row with its text field replaced by `text`."""
        if self.format == "jsonl":
            _, obj, made = row.payload
            out = {"id": row.id, **obj} if made else dict(obj)
            out[self.field] = text
            return json.dumps(out, ensure_ascii=False)
        if self.format == "csv":
            assert self.header is not None and self.field is not None  # a CSV corpus read for a field
            fields = list(row.payload)
            fields[self.header.index(self.field)] = text
            return fields
        out = dict(row.payload)
        out[self.field] = text
        return out


def _csv_header(name: str) -> list[str]:
    try:
        with open(name, newline="", encoding="utf-8-sig", errors="surrogateescape") as f:
            header = next(csv.reader(f), None)
        if header:
            "".join(header).encode("utf-8")
    except (OSError, UnicodeError, csv.Error) as exc:
        raise DataError(f"{name}: cannot read the CSV header: {exc}") from None
    if not header:
        raise DataError(f"{name}: empty CSV file (no header)")
    return header


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError("reading or writing Parquet needs pyarrow (pip install 'runwatch[data]')") from None
    return pq


class Writer(Protocol):
    """What `open_writer` returns: `write` takes the format's item (`Corpus.raw_item`,
    `Corpus.normalized_item`: a JSONL line, a CSV row's fields, a Parquet row's dict)."""

    def write(self, item: Any) -> None: ...

    def close(self) -> None: ...


class JsonlWriter:
    """Lines of JSON text, UTF-8; `close()` fsyncs."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "w", encoding="utf-8", newline="\n", buffering=1 << 20)

    def write(self, item: str) -> None:
        try:
            self._f.write(item + "\n")
        except UnicodeEncodeError:  # a lone surrogate, only ever inside a JSON string: write JSON's \uXXXX
            self._f.write(item.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()


class _CsvWriter:
    def __init__(self, path: str, header: list[str]) -> None:
        self._f = open(path, "w", encoding="utf-8", newline="", buffering=1 << 20)
        self._w = csv.writer(self._f)
        self._w.writerow(header)

    def write(self, item: list[str]) -> None:
        self._w.writerow(item)

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()


class _ParquetWriter:
    def __init__(self, path: str, schema: Any) -> None:
        pq = _pyarrow_parquet()
        self._path = path
        self._schema = schema
        self._w = pq.ParquetWriter(path, schema)
        self._rows: list[dict[str, Any]] = []

    def write(self, item: dict[str, Any]) -> None:
        self._rows.append(item)
        if len(self._rows) >= PARQUET_BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._rows:
            self._w.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._w.close()
        with open(self._path, "rb") as f:
            os.fsync(f.fileno())


def open_writer(corpus: Corpus, path: str) -> Writer:
    """A writer of `corpus`'s format at `path`: `.write(item)` then `.close()` (which fsyncs)."""
    if corpus.format == "jsonl":
        return JsonlWriter(path)
    if corpus.format == "csv":
        assert corpus.header is not None  # set for every CSV corpus
        return _CsvWriter(path, corpus.header)
    return _ParquetWriter(path, corpus.schema)
