"""The options contract: one definition per option, and the command-line parser.

An option is a field of a frozen dataclass, declared once with `option(...)`:

    stall: float = option(360.0, POSITIVE, "stall: no new record for S seconds", metavar="S")

Everything else is generated from that declaration, never written again by hand:

- the validation (`validate`, called from the dataclass's `__post_init__`): a bad value raises
  `ConfigError` naming the option, `watch.stall must be a number > 0, got -5`;
- the command-line flags (`add_flags`): `--stall S`, its type, and its help with the default;
- the `runwatch.toml` reading (`read_toml`): key `stall` (or `startup-grace` for `startup_grace`)
  in the `[watch]` table;
- the options table in the docs (`markdown_table`; a test keeps docs/WATCHDOG.md in step).

Which commands take an option is part of its declaration (`commands=`), so `check` and `plot`
offer exactly the record rules' options and `watch` every one. Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, UsageError
from .files import CONFIG, read_bounded

__all__ = [
    "default_text",
    "Parser",
    "add_command_arguments",
    "split_command",
    "Check",
    "option",
    "validate",
    "add_flags",
    "read_toml",
    "markdown_table",
    "build",
    "given_options",
    "option_fields",
    "POSITIVE",
    "NON_NEGATIVE",
    "NUMBER",
    "INT_1",
    "INT_0",
    "TEXT",
    "FLAG",
    "GREATER_1",
    "OPEN_01",
    "HALF_TO_1",
    "TEXTS",
    "EXIT_CODE",
]


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so `main(argv)` returns codes."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def add_command_arguments(
    p: argparse.ArgumentParser, declare: Callable[[argparse.ArgumentParser], None], what: str
) -> None:
    """`RUN_DIR [options] -- CMD ...` for launch, supervise and bench: argparse cannot put options
    between a positional and a `--` command, so everything from RUN_DIR on is taken as is and split
    at the first `--` by `split_command`. `declare` adds the command's options."""
    declare(p)
    p.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="RUN_DIR [options] -- CMD ...",
        help=f"the run directory (created if missing), {what}, then the training command",
    )


def split_command(
    args: argparse.Namespace,
    command: str,
    declare: Callable[[argparse.ArgumentParser], None],
    dash_values: tuple[str, ...] = (),
) -> list[str]:
    """Parse `args.rest` (RUN_DIR and options up to `--`) into `args`; return the command after `--`.
    Options given before RUN_DIR are kept; a missing `--` or command is a UsageError. The flags in
    `dash_values` take the next word as their value even when it starts with `-` (argparse would
    take `--resume-args --init_from=resume` for two options)."""
    rest = list(args.rest)
    if "--" not in rest:
        raise UsageError(f"{command}: expected RUN_DIR [options] -- CMD ...")
    i = rest.index("--")
    head, cmd = rest[:i], rest[i + 1 :]
    glued: list[str] = []
    for word in head:
        if glued and glued[-1] in dash_values:
            glued[-1] = f"{glued[-1]}={word}"
        else:
            glued.append(word)
    head = glued
    sub = Parser(prog=f"runwatch {command}", add_help=False)
    declare(sub)
    sub.add_argument("run_dir", metavar="RUN_DIR")
    given = {k: v for k, v in vars(args).items() if v is not None and k != "rest"}
    sub.parse_args(head, namespace=args)
    for k, v in given.items():  # options given before RUN_DIR
        if getattr(args, k) in (None, False):
            setattr(args, k, v)
    if not cmd:
        raise UsageError(f"{command}: no command given (runwatch {command} RUN_DIR -- CMD ...)")
    return cmd


def _num(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


@dataclass(frozen=True)
class Check:
    """What an option's value must be: the words for the message, the test, the flag's type."""

    expect: str
    ok: Callable[[Any], bool]
    arg_type: Any = float  # argparse `type=`; None for a store_true flag; str for a repeatable one


# runwatch.toml is a few hundred bytes: 1 MiB bounds what anything else put there costs.
MAX_CONFIG_BYTES = 1 << 20

POSITIVE = Check("a number > 0", lambda v: _num(v) and v > 0)
NON_NEGATIVE = Check("a number >= 0", lambda v: _num(v) and v >= 0)
NUMBER = Check("a finite number", _num)
GREATER_1 = Check("a number > 1", lambda v: _num(v) and v > 1)
OPEN_01 = Check("a number in (0, 1)", lambda v: _num(v) and 0 < v < 1)
HALF_TO_1 = Check("a number in [0.5, 1]", lambda v: _num(v) and 0.5 <= v <= 1)
INT_1 = Check("an int >= 1", lambda v: type(v) is int and v >= 1, int)
INT_0 = Check("an int >= 0", lambda v: type(v) is int and v >= 0, int)
EXIT_CODE = Check("an int in 1..255", lambda v: type(v) is int and 1 <= v <= 255, int)
TEXT = Check("a non-empty string", lambda v: type(v) is str and v != "", str)
FLAG = Check("true or false", lambda v: type(v) is bool, None)
TEXTS = Check("a list of strings", lambda v: isinstance(v, (list, tuple)) and all(type(x) is str for x in v), str)


def option(
    default: Any,
    check: Check,
    help: str,
    *,
    none: bool = False,
    metavar: str | None = None,
    commands: tuple[str, ...] = ("watch",),
    expect: str | None = None,
) -> Any:
    """Declare one option: its default, what it must be, its help line, and the commands that take it.

    `none=True`: the option may be unset (None). `expect` overrides the check's words in messages.
    A tuple default is a repeatable option (`--map A --map B`; a list in `runwatch.toml`).
    """
    return field(
        default=default,
        metadata={
            "check": check,
            "help": help,
            "none": none,
            "metavar": metavar,
            "commands": commands,
            "expect": expect or check.expect,
        },
    )


def _show(value: Any) -> str:
    if type(value) is float:
        return f"{value:g}"
    if type(value) is str:
        return repr(value)
    return json.dumps(value, default=repr)


def validate(obj: Any, section: str = "watch") -> None:
    """Check every option field of the dataclass `obj`; ConfigError naming the first bad one."""
    for f in dataclasses.fields(obj):
        meta = f.metadata
        if "check" not in meta:
            continue
        value = getattr(obj, f.name)
        if value is None and meta["none"]:
            continue
        if not meta["check"].ok(value):
            raise ConfigError(f"{section}.{f.name} must be {meta['expect']}, got {_show(value)}")
        if isinstance(value, list):
            object.__setattr__(obj, f.name, tuple(value))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def default_text(f: dataclasses.Field[Any]) -> str:
    d = f.default
    if d is None:
        return "none"
    if d is False or d == ():
        return "off" if d is False else "none"
    return f"{d:g}" if type(d) is float else str(d)


def option_fields(cls: type, command: str | None = None) -> list[dataclasses.Field[Any]]:
    """The option fields of `cls` (those a `command` takes, when given), in declaration order."""
    return [
        f
        for f in dataclasses.fields(cls)
        if "check" in f.metadata and (command is None or command in f.metadata["commands"])
    ]


def add_flags(parser: argparse.ArgumentParser, cls: type, command: str, *, skip: tuple[str, ...] = ()) -> None:
    """Add a flag for each option of `cls` that `command` takes; every default is None ("not given")."""
    for f in option_fields(cls, command):
        if f.name in skip:
            continue
        meta = f.metadata
        check: Check = meta["check"]
        text = f"{meta['help']} (default {default_text(f)})"
        if check.arg_type is None:
            parser.add_argument(_flag(f.name), dest=f.name, action="store_true", default=None, help=text)
        elif isinstance(f.default, tuple):
            parser.add_argument(
                _flag(f.name),
                dest=f.name,
                action="append",
                default=None,
                metavar=meta["metavar"],
                help=text + "; repeatable",
            )
        else:
            parser.add_argument(
                _flag(f.name), dest=f.name, type=check.arg_type, default=None, metavar=meta["metavar"], help=text
            )


def given_options(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The options of `cls` that the command line set (argparse leaves the others None)."""
    out: dict[str, Any] = {}
    for f in option_fields(cls):
        value = getattr(args, f.name, None)
        if value is not None:
            out[f.name] = tuple(value) if isinstance(value, list) else value
    return out


def read_toml(directory: str | None, cls: type, command: str, table: str = "watch") -> dict[str, Any]:
    """The `[table]` of `directory/runwatch.toml` as option values (only those `command` takes).

    A key may be spelled with `-` or `_`. An unknown key, a broken file or a non-table is a
    ConfigError; the values are validated when the options are built.
    """
    path = os.path.join(directory, CONFIG) if directory else None
    if not path or not os.path.lexists(path):
        return {}
    import tomllib

    try:  # a regular file only, never blocking, bounded: anyone may have put something else there
        data = read_bounded(path, MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{CONFIG}: larger than {MAX_CONFIG_BYTES} bytes")
        doc = tomllib.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{CONFIG}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{CONFIG}: nested too deeply") from None
    section = doc.get(table, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{CONFIG}: [{table}] must be a table")
    known = {f.name: f for f in option_fields(cls)}
    out: dict[str, Any] = {}
    for key, value in section.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"{CONFIG}: unknown option {key!r} in [{table}]")
        if command in known[name].metadata["commands"]:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out


def build(cls: type, directory: str | None, given: dict[str, Any], command: str) -> Any:
    """`cls` from `directory/runwatch.toml`'s [watch] table, then `given` (the command line) on top."""
    merged = read_toml(directory, cls, command)
    merged.update({k: v for k, v in given.items() if v is not None and v != ()})
    return cls(**merged)


def markdown_table(cls: type, command: str | None = None, *, without: type | None = None) -> str:
    """The options of `cls` (less those of its base `without`) as a Markdown table: flag, default,
    what it does. The docs' tables are this text; a test keeps them in step."""
    rows = ["| option | default | what |", "| --- | --- | --- |"]
    skip = {f.name for f in option_fields(without)} if without is not None else set()
    for f in option_fields(cls, command):
        if f.name in skip:
            continue
        meta = f.metadata
        flag = _flag(f.name) + (f" {meta['metavar']}" if meta["metavar"] else "")
        rows.append(f"| `{flag}` | {default_text(f)} | {meta['help']} |")
    return "\n".join(rows)
