"""Names resolved on first use: how a layer's face exports the names of its modules without
importing them.

A layer's face (`runwatch/<layer>/__init__.py`, and `runwatch/__init__.py`) holds static tables,
module -> names, and a module `__getattr__` (PEP 562) that asks `resolve` for a name it does not
hold yet: the module that the table names is imported then, and the value is kept in the face's
namespace, so the next lookup does not come here. Importing a face imports nothing else, and
importing any inner module imports its package's face first, so a face must stay this cheap.

    _PUBLIC = {".watchdog": ("Watcher", "watch")}   # the face's __all__
    _KEPT = {".replay": ("reached",)}              # importable for one release, not in __all__
    _WHERE = lazy.index(_PUBLIC, _KEPT)

    def __getattr__(name: str) -> Any:
        return lazy.resolve(__name__, globals(), _WHERE, name)

Standard library only.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any


def public(table: Mapping[str, Iterable[str]]) -> list[str]:
    """The names of a table, in its order: a face's `__all__`."""
    return [name for names in table.values() for name in names]


def index(*tables: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """name -> module from tables of module -> names; a name two modules claim is a mistake."""
    where: dict[str, str] = {}
    for table in tables:
        for module, names in table.items():
            for name in names:
                if name in where:
                    raise ValueError(f"{name} is named twice, in {where[name]} and in {module}")
                where[name] = module
    return where


def resolve(package: str, namespace: MutableMapping[str, Any], where: Mapping[str, str], name: str) -> Any:
    """The value of `name` for the face `package`: imported from its module, kept in `namespace`."""
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, package), name)
    namespace[name] = value  # later lookups find it without the face's __getattr__
    return value


def listing(namespace: Mapping[str, Any], where: Mapping[str, str]) -> list[str]:
    """A face's `dir()`: what it holds now and every name it resolves."""
    return sorted(set(namespace) | set(where))
