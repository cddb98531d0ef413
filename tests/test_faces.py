"""The public API, one face per layer (docs/ARCHITECTURE.md, "The public API: one face per layer").

Each layer's package is its face: two static tables, `_PUBLIC` (its `__all__`) and `_KEPT` (the
names exported before the faces, importable for one release), resolved on first use. These tests
measure that the tables hold what they say, that the docs import only from faces, that the faces
stay cheap, and how large the public surface is.
"""

from __future__ import annotations

import ast
import importlib
import os
import pathlib
import re
import subprocess
import sys

import pytest

from runwatch import lazy

REPO = pathlib.Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "runwatch"

# The layers' packages, each its own face with the two tables.
PACKAGE_FACES = ["files", "procs", "reading", "logger", "integrations", "judging", "supervising", "preflight", "views"]
# Single modules that are their own face: their `__all__` is their public table.
MODULE_FACES = ["options", "errors"]
# The compatibility modules at the root: names they exported, resolved from where they live now.
SHIMS = ["watchdog", "records", "status", "heartbeats"]
# The face modules' files, relative to src/runwatch: the only ones that may define `__all__`.
FACE_FILES = {"__init__.py", "options.py", "errors.py", *(f"{p}/__init__.py" for p in PACKAGE_FACES)}
# The frameworks a table's module imports: its names are checked where they are installed.
FRAMEWORKS = {
    ("integrations", ".hf"): ("transformers", "torch"),
    ("integrations", ".lightning"): ("lightning", "torch"),
}
# The most names all faces together may export (the root's re-exports aside). Before the faces the
# surface was every module's `__all__`: 629 names in 104 lists. A newcomer reads the faces' tables,
# not the tree: with the faces they export 271 names in 11 faces, each used outside its package (by
# another layer, which imports it through the face, the command line or the docs; files, the run
# directory's names and variables, is the largest); the bound keeps that reading short and is
# lowered when a face sheds names, never raised to let a layer's internals through.
MAX_PUBLIC_NAMES = 275


def _face(name: str):
    return importlib.import_module(f"runwatch.{name}")


def _tables(face) -> list[tuple[str, str]]:
    return [(module, n) for table in (face._PUBLIC, face._KEPT) for module, names in table.items() for n in names]


def _installed(face: str, module: str) -> bool:
    return all(importlib.util.find_spec(f) is not None for f in FRAMEWORKS.get((face, module), ()))


@pytest.mark.parametrize("name", PACKAGE_FACES)
def test_every_name_of_a_face_is_the_object_of_the_module_its_table_names(name):
    face = _face(name)
    wrong = []
    for module, n in _tables(face):
        if not _installed(name, module):
            continue
        inner = importlib.import_module(module, face.__name__)
        if getattr(face, n) is not getattr(inner, n):
            wrong.append(f"runwatch.{name}.{n} is not {inner.__name__}.{n}")
    assert wrong == []


@pytest.mark.parametrize("name", PACKAGE_FACES)
def test_a_faces_all_is_its_public_table_and_what_type_checkers_see(name):
    face = _face(name)
    assert face.__all__ == lazy.public(face._PUBLIC)
    assert len(face.__all__) == len(set(face.__all__))
    assert not set(face.__all__) & {n for names in face._KEPT.values() for n in names}
    # the TYPE_CHECKING block imports exactly the public names, each from its table's module
    tree = ast.parse((SRC / name / "__init__.py").read_text(encoding="utf-8"))
    seen = set()
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.level == 1
                for a in imp.names:
                    assert a.asname == a.name, f"{a.name}: import it as itself, so it is re-exported"
                    seen.add(("." + (imp.module or ""), a.name))
    assert seen == {(m, n) for m, names in face._PUBLIC.items() for n in names}


@pytest.mark.parametrize("name", PACKAGE_FACES)
def test_a_face_says_what_its_layer_is_for_and_shows_its_use(name):
    doc = _face(name).__doc__ or ""
    assert f"from runwatch.{name} import " in doc


def test_a_face_refuses_a_name_it_does_not_hold_and_lists_what_it_does():
    judging = _face("judging")
    with pytest.raises(AttributeError, match=r"^module 'runwatch.judging' has no attribute 'Nothing'$"):
        judging.Nothing  # noqa: B018
    assert {"Watcher", "check", "POLL_CHECKS"} <= set(dir(judging))


@pytest.mark.parametrize("name", MODULE_FACES)
def test_a_module_face_defines_every_name_of_its_all(name):
    face = _face(name)
    defined = set()
    for node in ast.parse((SRC / f"{name}.py").read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    assert sorted(set(face.__all__) - defined) == []
    assert len(face.__all__) == len(set(face.__all__))


def test_the_root_face_re_exports_from_the_faces():
    import runwatch

    assert runwatch.__all__[: len(lazy.public(runwatch._PUBLIC))] == lazy.public(runwatch._PUBLIC)
    for module, names in runwatch._PUBLIC.items():
        face = importlib.import_module(module, "runwatch")
        for n in names:
            assert n in face.__all__ and getattr(runwatch, n) is getattr(face, n)
    errors = _face("errors")
    for n in runwatch.__all__:
        if n not in lazy.public(runwatch._PUBLIC) and n != "__version__":
            assert getattr(runwatch, n) is getattr(errors, n)


def test_no_name_is_public_in_two_faces():
    owner: dict[str, str] = {}
    twice = []
    for name in PACKAGE_FACES + MODULE_FACES:
        for n in _face(name).__all__:
            if n in owner:
                twice.append(f"{n}: runwatch.{owner[n]} and runwatch.{name}")
            owner[n] = name
    assert twice == []


def test_the_public_surface_is_small():
    sizes = {name: len(_face(name).__all__) for name in PACKAGE_FACES + MODULE_FACES}
    total = sum(sizes.values())
    print(f"public names: {total} in {len(sizes)} faces: {sizes}")
    assert total <= MAX_PUBLIC_NAMES


@pytest.mark.parametrize("name", SHIMS)
def test_an_old_root_module_resolves_what_it_exported_and_exports_nothing(name):
    shim = _face(name)
    assert not hasattr(shim, "__all__")
    for module, names in shim._FROM.items():
        source = importlib.import_module(module)
        for n in names:
            assert getattr(shim, n) is getattr(source, n)


def test_the_callbacks_earlier_name_is_kept_beside_the_new_one():
    hf = pytest.importorskip("runwatch.integrations.hf", reason="the [hf] extra is not installed")
    lightning = pytest.importorskip("runwatch.integrations.lightning", reason="the [lightning] extra is not installed")
    integrations = _face("integrations")
    assert hf.RunwatchCallback is hf.HFCallback is integrations.HFCallback
    assert lightning.RunwatchCallback is lightning.LightningCallback is integrations.LightningCallback


def _loaded_after(code: str) -> list[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_logger_from_the_root_loads_no_judging_or_reading_module():
    loaded = _loaded_after("from runwatch import RunLogger")
    assert [m for m in loaded if m.startswith(("runwatch.judging", "runwatch.reading"))] == []
    assert "runwatch.logger.metrics" in loaded


def test_importing_every_face_imports_none_of_their_modules():
    faces = sorted(f"runwatch.{name}" for name in PACKAGE_FACES)
    loaded = _loaded_after(f"import {', '.join(faces)}")
    base = ["runwatch", "runwatch.errors", "runwatch.lazy", "runwatch.version"]
    assert [m for m in loaded if m.split(".")[0] == "runwatch"] == sorted(base + faces)


@pytest.mark.parametrize(
    ("name", "framework", "other"),
    [("HFCallback", "transformers", "lightning"), ("LightningCallback", "lightning", "hf")],
)
def test_a_callback_imports_its_framework_and_not_the_other(name, framework, other):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    loaded = _loaded_after(f"from runwatch.integrations import {name}")
    assert framework in loaded and f"runwatch.integrations.{other}" not in loaded
    if other == "lightning":  # (lightning itself imports transformers when it is installed)
        assert "lightning" not in loaded


# --- the docs name only faces ---------------------------------------------------------------------


def _doc_files() -> list[pathlib.Path]:
    skill = SRC / "views" / "agent" / "supervising-training-runs"
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(skill.rglob("*.md"))]


def _public(face: str) -> set[str]:
    return set(_face(face).__all__) if face else set(importlib.import_module("runwatch").__all__)


FACE_NAMES = set(PACKAGE_FACES + MODULE_FACES)
IMPORT_LINE = re.compile(r"^\s*from runwatch((?:\.\w+)*) import \(?([\w ,]+)\)?", re.M)
DOTTED = re.compile(r"(?<![\w./-])runwatch((?:\.\w+)+)")


def _wrong_references(path: pathlib.Path, root: pathlib.Path = REPO) -> list[str]:
    text = path.read_text(encoding="utf-8")
    wrong = []
    for m in IMPORT_LINE.finditer(text):
        face = m.group(1).lstrip(".")
        names = [n.strip() for n in m.group(2).split(",") if n.strip()]
        if face and face not in FACE_NAMES:
            wrong.append(f"from runwatch.{face} import ...: not a face")
        elif not set(names) <= _public(face):
            wrong.append(f"from runwatch.{face} import {sorted(set(names) - _public(face))}: not public there")
    for m in DOTTED.finditer(text):
        parts = m.group(1).lstrip(".").split(".")
        before = text[max(0, m.start() - 10) : m.start()]
        if before.endswith("python -m ") or parts == ["toml"]:
            continue  # a program, and the config file
        if path.name == "ARCHITECTURE.md" and parts[0] in SHIMS and len(parts) == 1:
            continue  # where the old paths are described
        if parts[0] in _public(""):
            continue
        if parts[0] not in FACE_NAMES or (len(parts) > 1 and parts[1] not in _public(parts[0])):
            wrong.append("runwatch." + ".".join(parts))
    return [f"{path.relative_to(root)}: {w}" for w in wrong]


def test_the_docs_readme_and_skill_import_only_from_faces():
    assert [w for path in _doc_files() for w in _wrong_references(path)] == []


def test_the_docs_check_would_see_a_deep_path(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "from runwatch.judging.watchdog import Watcher\n"
        "see `runwatch.judging.verdict.exit_status`, `runwatch.judging.exit_status` and `runwatch.reading.Nothing`;\n"
        "run `python -m runwatch.demo.tinytrain` with a `runwatch.toml`\n",
        encoding="utf-8",
    )
    wrong = [w.split(": ", 1)[1] for w in _wrong_references(page, tmp_path)]
    assert wrong == [
        "from runwatch.judging.watchdog import ...: not a face",
        "runwatch.judging.watchdog",
        "runwatch.judging.verdict.exit_status",
        "runwatch.reading.Nothing",
    ]


# --- no private name crosses a module -------------------------------------------------------------


def _module_name(path: pathlib.Path) -> list[str]:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _is_module(dotted: list[str]) -> bool:
    base = SRC.parent.joinpath(*dotted)
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _private_crossings(path: pathlib.Path, name: list[str]) -> list[str]:
    """Private names `path` (the module `name`) imports from, or reads off, another runwatch module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name[:-1]
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            elif (node.module or "").split(".")[0] == "runwatch":
                base = (node.module or "").split(".")
            else:
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{'.'.join(name)}:{node.lineno} imports {'.'.join(base)}.{a.name}")
                if _is_module([*base, a.name]):
                    modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "runwatch"}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{'.'.join(name)}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_no_private_name_is_imported_across_modules():
    assert [f for path in sorted(SRC.rglob("*.py")) for f in _private_crossings(path, _module_name(path))] == []


def test_the_private_name_check_would_see_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from .rules import _hidden\nfrom .rules import Rules as _Rules\nfrom . import verdict\nx = verdict._code\n",
        encoding="utf-8",
    )
    assert _private_crossings(probe, ["runwatch", "judging", "probe"]) == [
        "runwatch.judging.probe:1 imports runwatch.judging.rules._hidden",
        "runwatch.judging.probe:4 uses verdict._code",
    ]


# --- another package is reached through its face ---------------------------------------------------

# Names a module of another package may import from an inner module rather than the face: each
# command's entry points, and the names docs/ARCHITECTURE.md lists as staying at their module (a name
# two modules of one package define as two things; a name that is also its module's name).
STAY_AT_MODULE = {"run", "main", "add_arguments", "stop", "open_regular", "Failure", "render", "open_reader", "is_log"}


def _deep_imports(path: pathlib.Path, name: list[str]) -> list[str]:
    """The names `path` (the module `name`) imports from inside another package of runwatch instead of
    from that package's face (modules imported as such aside)."""
    package = name if path.name == "__init__.py" else name[:-1]
    own = name[1] if len(name) > 2 or path.name == "__init__.py" and len(name) > 1 else None
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
        if len(base) < 3 or base[1] not in PACKAGE_FACES or base[1] == own:
            continue
        for a in node.names:
            if _is_module([*base, a.name]) or a.name in STAY_AT_MODULE or a.name == base[-1]:
                continue
            found.append(f"{'.'.join(name)}:{node.lineno} imports {a.name} from {'.'.join(base)}")
    return found


def test_another_package_is_imported_through_its_face():
    """Within the package too, a module reaches another layer (or package) by its face: the face's
    tables are the whole of what a layer offers the others."""
    assert [f for path in sorted(SRC.rglob("*.py")) for f in _deep_imports(path, _module_name(path))] == []


def test_the_face_check_would_see_a_deep_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from ..files.rundir import RunDir\nfrom ..files import RunDir\nfrom .rules import Rules\n"
        "from ..procs import process\nfrom ..supervising.launch import launch\nfrom ..reading.readers import add_arguments\n",
        encoding="utf-8",
    )
    assert _deep_imports(probe, ["runwatch", "judging", "probe"]) == [
        "runwatch.judging.probe:1 imports RunDir from runwatch.files.rundir"
    ]


@pytest.mark.parametrize(
    ("former", "name", "now"),
    [
        ("runwatch.reading.source", "iter_records", "runwatch.reading.records"),
        ("runwatch.reading.source", "load_sessions", "runwatch.reading.records"),
        ("runwatch.supervising.supervise", "run", "runwatch.supervising.supervisecommand"),
        ("runwatch.supervising.supervise", "add_arguments", "runwatch.supervising.supervisecommand"),
        ("runwatch.files.schema", "open_regular", "runwatch.files.lines"),
        ("runwatch.files.schema", "iter_lines", "runwatch.files.lines"),
        ("runwatch.logger.metrics", "WINDOW_ENV", "runwatch.logger.window"),
    ],
)
def test_a_name_that_moved_still_imports_from_its_former_module(former, name, now):
    """A deep path of the release before keeps working for one release, as the very object."""
    moved = getattr(importlib.import_module(now), "open_run_file" if name == "open_regular" else name)
    assert getattr(importlib.import_module(former), name) is moved
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = importlib.import_module(former).nothing_here
