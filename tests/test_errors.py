"""The one exception hierarchy (errors.py): every exception the package defines or raises on purpose
lives there and is exported from `runwatch`; every configuration check raises ConfigError with a
message that names the option, what it must be and what it got."""

from __future__ import annotations

import ast
import builtins
import os
from pathlib import Path

import pytest

import runwatch
from runwatch import ConfigError, RunLogger, UsageError, errors

PACKAGE = Path(runwatch.__file__).parent
RECIPE = {"batch_size": 2, "seq_len": 3, "gradient_accumulation_steps": 1}


# --- the hierarchy, walked from the source ---------------------------------------------------------


class Package:
    """The package's modules as syntax trees, and which names in them are exception classes."""

    def __init__(self, sources: dict[str, tuple[str, bool]]) -> None:
        # module name -> (tree, whether it is a package's __init__)
        self.trees = {name: (ast.parse(text), is_pkg) for name, (text, is_pkg) in sources.items()}
        self.imports = {name: self._imports(name, tree, is_pkg) for name, (tree, is_pkg) in self.trees.items()}
        self.classes = {
            name: {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
            for name, (tree, _) in self.trees.items()
        }

    @classmethod
    def from_disk(cls, root: Path) -> Package:
        sources = {}
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            is_pkg = parts[-1] == "__init__"
            sources[".".join(parts[:-1] if is_pkg else parts)] = (path.read_text(encoding="utf-8"), is_pkg)
        return cls(sources)

    @staticmethod
    def _imports(module: str, tree: ast.AST, is_pkg: bool) -> dict[str, tuple[str, str]]:
        """`alias -> (module, name)` of the module's `from X import name` statements."""
        out = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = module.split(".") if is_pkg else module.split(".")[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    source = ".".join(parts + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    out[alias.asname or alias.name] = (source, alias.name)
        return out

    def resolve(self, module: str, name: str) -> tuple[str, str] | None:
        """Where `name`, as used in `module`, is defined in the package: (module, class name)."""
        if name in self.classes.get(module, {}):
            return module, name
        if name in self.imports.get(module, {}):
            source, original = self.imports[module][name]
            if source in self.trees:
                return self.resolve(source, original)
        return None

    def is_exception(self, module: str, name: str, seen: frozenset = frozenset()) -> bool:
        """Whether `name` in `module` is an exception class (its bases reach a builtin exception)."""
        where = self.resolve(module, name)
        if where is None:
            source = self.imports.get(module, {}).get(name)
            if source is not None:  # imported from outside the package: ask Python
                value = getattr(__import__(source[0], fromlist=[source[1]]), source[1], None)
            else:
                value = getattr(builtins, name, None)
            return isinstance(value, type) and issubclass(value, BaseException)
        if where in seen:
            return False
        node = self.classes[where[0]][where[1]]
        return any(
            base_name is not None and self.is_exception(where[0], base_name, seen | {where})
            for base_name in (_name_of(b) for b in node.bases)
        )

    def exceptions(self) -> dict[tuple[str, str], list[str]]:
        """Every exception class the package defines or raises: (module, name) -> where it was seen."""
        found: dict[tuple[str, str], list[str]] = {}
        for module, (tree, _) in self.trees.items():
            for name in self.classes[module]:
                if self.is_exception(module, name):
                    found.setdefault((module, name), []).append(f"{module}: class {name}")
            for node in ast.walk(tree):
                if isinstance(node, ast.Raise) and node.exc is not None:
                    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                    raised = _name_of(exc)
                    where = self.resolve(module, raised) if raised else None
                    if where is not None and self.is_exception(module, raised):
                        found.setdefault(where, []).append(f"{module}:{node.lineno}: raise {raised}")
        return found

    def caught(self, module: str, name: str) -> bool:
        """Whether `module` has an `except` clause naming `name`."""
        tree = self.trees[module][0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
                if any(_name_of(t) == name for t in types):
                    return True
        return False


def _name_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def test_every_exception_of_the_package_is_in_errors_py_and_exported():
    package = Package.from_disk(PACKAGE)
    found = package.exceptions()
    assert len(found) >= 15, sorted(found)  # the walk sees the hierarchy (it cannot pass on nothing)
    for (module, name), seen in sorted(found.items()):
        if name.startswith("_"):  # a module's own control flow: it must never leave the module
            assert package.caught(module, name), f"{name} of {module} is raised but never caught there: {seen}"
            continue
        assert module == "runwatch.errors", f"{name} is defined in {module}, not in errors.py: {seen}"
        assert name in errors.__all__, f"{name} is missing from runwatch.errors.__all__"
        assert name in runwatch.__all__, f"{name} is missing from runwatch.__all__"
        assert getattr(runwatch, name) is getattr(errors, name)


def test_the_walk_finds_an_exception_defined_outside_errors_py():
    sources = {
        "pkg": ("", True),
        "pkg.errors": ("class BaseError(Exception): pass\n", False),
        "pkg.rules": ("class SessionError:\n    pass\nclass Interrupted(SessionError):\n    pass\n", False),
        "pkg.readers": ("", True),
        "pkg.readers.store": (
            "from ..errors import BaseError as B\n"
            "class StoreLockedError(B): pass\n"
            "def f():\n    raise StoreLockedError('locked')\n",
            False,
        ),
        "pkg.readers.parse": ("class _Malformed(ValueError): pass\ndef g():\n    raise _Malformed\n", False),
    }
    package = Package(sources)
    found = package.exceptions()
    assert sorted(found) == [
        ("pkg.errors", "BaseError"),
        ("pkg.readers.parse", "_Malformed"),
        ("pkg.readers.store", "StoreLockedError"),
    ]  # a rule named ...Error is not an exception
    assert found[("pkg.readers.store", "StoreLockedError")] == [
        "pkg.readers.store: class StoreLockedError",
        "pkg.readers.store:4: raise StoreLockedError",
    ]
    assert not package.caught("pkg.readers.parse", "_Malformed")


def test_errors_all_lists_each_name_once_and_the_docstring_draws_every_class():
    assert len(errors.__all__) == len(set(errors.__all__))
    classes = [n for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    tree = errors.__doc__.split("The command line maps")[0]
    for name in classes:
        assert f" {name}" in tree, f"{name} is not drawn in errors.py's docstring"
        cls = getattr(errors, name)
        assert issubclass(cls, (errors.RunwatchError, KeyboardInterrupt))


def test_moved_exceptions_stay_importable_where_they_were():
    from runwatch.logger.signals import Terminated
    from runwatch.reading.readers.mlflowstore import StoreLockedError

    assert StoreLockedError is runwatch.StoreLockedError and issubclass(StoreLockedError, runwatch.RunwatchError)
    assert Terminated is runwatch.Terminated and issubclass(Terminated, KeyboardInterrupt)
    assert not issubclass(Terminated, Exception)


# --- ConfigError from every configuration check ---------------------------------------------------


def _logger(tmp_path, **kwargs):
    kwargs.setdefault("recipe", RECIPE)
    return RunLogger(tmp_path / "run", **kwargs)


def _step(tmp_path, recipe=RECIPE, **kwargs):
    with RunLogger(tmp_path / "run", recipe=recipe, window=1) as log:
        log.step(**{"loss": 1.0, "lr": 0.1, "grad_norm": 1.0, **kwargs})


def _call(tmp_path, method, *args):
    with RunLogger(tmp_path / "run", recipe=RECIPE) as log:
        result = getattr(log, method)(*args)
        if method == "phase":
            with result:
                pass


CONSTRUCTION = [
    (
        dict(recipe=None),
        "RunLogger.recipe must be a dict with batch_size, seq_len and gradient_accumulation_steps, got None",
    ),
    (
        dict(recipe=[1]),
        "RunLogger.recipe must be a dict with batch_size, seq_len and gradient_accumulation_steps, got list",
    ),
    (
        dict(recipe={"batch_size": 1, "seq_len": 1}),
        "RunLogger.recipe.gradient_accumulation_steps must be a positive int, got none (the key is missing)",
    ),
    (dict(recipe=dict(RECIPE, seq_len=0)), "RunLogger.recipe.seq_len must be a positive int, got 0"),
    (dict(recipe=dict(RECIPE, batch_size=2.0)), "RunLogger.recipe.batch_size must be a positive int, got 2.0"),
    (
        dict(recipe=dict(RECIPE, qk_clip_threshold=-1)),
        "RunLogger.recipe.qk_clip_threshold must be a positive number or None, got -1",
    ),
    (dict(window=0), "RunLogger.window must be an int >= 1, got 0"),
    (dict(window=2.0), "RunLogger.window must be an int >= 1, got 2.0"),
    (dict(max_window_seconds=-1), "RunLogger.max_window_seconds must be a finite number > 0 or None, got -1"),
    (
        dict(optimizers=[{"name": "x"}]),
        "RunLogger.optimizers[0] must be a dict with a string 'algorithm', got {'name': 'x'}",
    ),
    (dict(hardware=[]), "RunLogger.hardware must be a dict or None, got list"),
    (dict(heartbeat=30), "RunLogger.heartbeat must be a HeartbeatConfig or None, got int"),
    (dict(resume_from=[]), "RunLogger.resume_from must be a dict from state_dict(), got list"),
    (dict(resume_from={"step": -1}), "RunLogger.resume_from.step must be an int >= 0, got -1"),
]


@pytest.mark.parametrize("kwargs, message", CONSTRUCTION)
def test_runlogger_arguments(tmp_path, kwargs, message):
    with pytest.raises(ConfigError) as info:
        _logger(tmp_path, **kwargs)
    assert str(info.value) == message
    assert not os.path.exists(tmp_path / "run" / "run.json")  # checked before anything is written


def test_run_dir_and_runwatch_window(tmp_path, monkeypatch):
    monkeypatch.delenv("RUNWATCH_RUN_DIR", raising=False)
    with pytest.raises(ConfigError) as info:
        RunLogger(recipe=RECIPE)
    assert str(info.value) == "RunLogger.run_dir must be a path (or RUNWATCH_RUN_DIR set), got None"
    monkeypatch.setenv("RUNWATCH_WINDOW", "ten")
    with pytest.raises(ConfigError) as info:
        _logger(tmp_path)
    assert str(info.value) == "RUNWATCH_WINDOW must be an int >= 1, got 'ten'"


CALLS = [
    (
        lambda d: _step(d, grad_norm=None),
        "RunLogger.step: grad_norm must be a number or a one-element tensor, got None",
    ),
    (
        lambda d: _step(d, qk_observed=8, qk_clipped=1),
        "RunLogger.step: qk_observed and qk_clipped need recipe.qk_clip_threshold (a positive number), got None",
    ),
    (lambda d: _step(d, lr=-0.5), "RunLogger.step: lr must be a finite number >= 0, got -0.5"),
    (lambda d: _step(d, lr=float("nan")), "RunLogger.step: lr must be a finite number >= 0, got nan"),
    (
        lambda d: _call(d, "checkpoint", "ckpt.pt", -1.0),
        "RunLogger.checkpoint: seconds must be a finite number >= 0, got -1.0",
    ),
    (
        lambda d: _call(d, "checkpoint", "ckpt.pt", "slow"),
        "RunLogger.checkpoint: seconds must be a finite number >= 0, got 'slow'",
    ),
    (
        lambda d: _call(d, "checkpoint", "ckpt.pt", None),
        "RunLogger.checkpoint: seconds must be a finite number >= 0, got None",
    ),
    (
        lambda d: _call(d, "checkpoint", "ckpt.pt", 1.0, -5),
        "RunLogger.checkpoint: bytes must be an int >= 0, got -5",
    ),
    (
        lambda d: _call(d, "phase", "Eval"),
        "RunLogger.phase: name must match [a-z][a-z0-9_]* (e.g. 'eval'), got 'Eval'",
    ),
    (
        lambda d: _call(d, "close", "done"),
        "RunLogger.close: reason must be one of ['error', 'interrupted', 'nonfinite_loss', 'normal'], got 'done'",
    ),
]


@pytest.mark.parametrize("call, message", CALLS)
def test_runlogger_calls(tmp_path, call, message):
    with pytest.raises(ConfigError) as info:
        call(tmp_path)
    assert str(info.value) == message


def test_other_options():
    from runwatch.files.heartbeats import HeartbeatConfig
    from runwatch.integrations.session import CallbackOptions
    from runwatch.reading.follow import LogFollower

    cases = [
        (lambda: HeartbeatConfig(every_seconds=0), "heartbeat.every_seconds must be a finite number > 0, got 0"),
        (
            lambda: LogFollower("metrics.jsonl", max_line_bytes=0),
            "LogFollower.max_line_bytes must be an int >= 1, got 0",
        ),
        (lambda: LogFollower("metrics.jsonl", chunk_bytes=1.5), "LogFollower.chunk_bytes must be an int >= 1, got 1.5"),
        (lambda: CallbackOptions(fsync=1), "RunwatchCallback.fsync must be a bool, got 1"),
        (lambda: CallbackOptions(run_dir=3), "RunwatchCallback.run_dir must be a path or None, got 3"),
    ]
    for make, message in cases:
        with pytest.raises(ConfigError) as info:
            make()
        assert str(info.value) == message


def test_config_error_is_a_value_error_and_a_usage_error():
    """Code that validates arguments the Python way still catches it; the command line exits 2."""
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, UsageError)
