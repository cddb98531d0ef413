"""The layout's habits: a module over 500 lines says in its header why it is one module."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "runwatch"


def test_a_long_module_says_why_in_its_header():
    unexplained = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 500:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Longer than 500 lines on purpose:" not in doc:
                unexplained.append(f"{path.relative_to(SRC)} ({text.count(chr(10))} lines)")
    assert unexplained == []
