"""Checking one row of a corpus for `runwatch audit-data`: its check, then its normalizer.

`make_checker(check, normalize)` builds the function the audit runs on each row's text, in a worker
(`auditpool`) or in the auditing process (`--workers 0`): python (`ast.parse`), json (strict JSON)
text (non-empty text: not only whitespace) or MODULE:FUNCTION (None: the row passes; anything else, or an exception, rejects it), then none,
ast (parse and unparse) or black. Standard library only; black when asked for.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from typing import TypeAlias

from ..errors import UsageError
from ..files import strict_json

CHECKS = ("python", "json", "text")  # or MODULE:FUNCTION
NORMALIZERS = ("none", "ast", "black")

# What checking a row gives: None (kept, normalized text = raw text), a str (kept, that normalized
# text) or (stage, reason, message) (rejected).
CheckResult: TypeAlias = "str | tuple[str, str, str] | None"


def _load_function(spec: str) -> Callable[[str], object]:
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UsageError(f"--check {spec}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    fn: object = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"--check {spec}: {module_name} has no function {name!r}")
    return fn


def make_checker(check: str, normalize: str) -> Callable[[str, Callable[[int], None]], CheckResult]:
    """`fn(text, enter_stage) -> None | str | (stage, reason, message)`.

    None: kept, normalized text = raw text; a str: kept, that normalized text; a tuple: rejected.
    `enter_stage(1)` is called before normalizing, so a hang is reported in the right stage.
    """
    if check == "python":

        def run_check(text: str) -> ast.Module | None:
            return ast.parse(text)
    elif check == "json":

        def run_check(text: str) -> ast.Module | None:
            strict_json(text)
            return None
    elif check == "text":

        def run_check(text: str) -> ast.Module | None:
            if not text.strip():
                raise _Rejected("empty_text", "the text is empty" if not text else "the text is only whitespace")
            return None
    else:
        custom = _load_function(check)

        def run_check(text: str) -> ast.Module | None:
            result = custom(text)
            if result is not None:
                raise _Rejected(str(result))
            return None

    if normalize == "black":
        try:
            import black
        except ImportError:
            raise UsageError("--normalize black needs black (pip install 'runwatch[data]')") from None
        mode = black.Mode()

    def process(text: str, enter_stage: Callable[[int], None]) -> CheckResult:
        try:
            tree = run_check(text)
        except _Rejected as exc:
            return ("check", exc.reason[:200], exc.message)
        except Exception as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError, ...
            return ("check", type(exc).__name__, str(exc))
        if normalize == "none":
            return None
        enter_stage(1)
        try:
            if normalize == "ast":
                return ast.unparse(tree if tree is not None else ast.parse(text))  # only check python leaves a tree
            return black.format_str(text, mode=mode)
        except Exception as exc:
            return ("normalize", type(exc).__name__, str(exc))

    return process


class _Rejected(Exception):
    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.message = reason if message is None else message
