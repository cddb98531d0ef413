"""The layout's habits: imports flow down the layers, no cycle, and no module over 500 lines."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "runwatch"


# The package's layers, lowest first: a module imports from its own layer and those below it,
# never from above (docs/ARCHITECTURE.md draws them). The compatibility modules at the root
# (runwatch.watchdog, .records, .status, .heartbeats) and the command line are the top.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "version", "lazy"),  # the exception hierarchy and the exit codes; the faces' lazy names
    ("files", "procs", "options"),  # a run directory's files and formats, its processes; the options contract
    ("reading",),  # any log, read and followed as records
    ("logger", "integrations"),  # the training side: RunLogger and its callbacks
    ("judging",),  # the rules, the watch and its verdict, the acceptance summary
    ("supervising",),  # launch, supervise, schedulers, goodput
    ("preflight",),  # bench, plan, smoke, subsample, audit-data
    ("views",),  # status, plot, TensorBoard export, the page, the MCP tools
    ("demo",),
    ("cli", "__main__", "", "watchdog", "records", "status", "heartbeats"),
]
# The most lines a module may have; lower it when a module shrinks, never raise it.
MAX_MODULE_LINES = 500


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_pkg)
    return out


def _layer(module: str) -> int:
    head = module.split(".")[0] if module else ""
    for i, names in enumerate(LAYERS):
        if head in names:
            return i
    raise AssertionError(f"runwatch.{module} is in no layer: add its package to LAYERS")


def _imports(modules: dict[str, tuple[pathlib.Path, bool]]) -> dict[str, set[str]]:
    """Every runwatch module each module imports, at module level or inside a function."""
    edges: dict[str, set[str]] = {}
    for name, (path, is_pkg) in modules.items():
        package = name.split(".") if is_pkg else name.split(".")[:-1]
        if name == "":
            package = []
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                elif (node.module or "").split(".")[0] == "runwatch":
                    mod = (node.module or "").partition(".")[2]
                else:
                    continue
                targets = [f"{mod}.{a.name}".lstrip(".") for a in node.names] + [mod]
            elif isinstance(node, ast.Import):
                targets = [a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "runwatch"]
            for t in targets:
                while t not in modules and "." in t:
                    t = t.rpartition(".")[0]
                if t in modules and t != name:
                    found.add(t)
                    break
        edges[name] = found
    return edges


def test_imports_flow_down_the_layers():
    modules = _modules()
    upward = [
        f"runwatch.{a} imports runwatch.{b}"
        for a, targets in sorted(_imports(modules).items())
        for b in sorted(targets)
        if _layer(b) > _layer(a)
    ]
    assert upward == []


def test_no_import_cycle():
    """No module reaches itself through imports, module-level or inside functions."""
    edges = _imports(_modules())
    cycles = []
    for start in sorted(edges):
        seen, todo = set(), list(edges[start])
        while todo:
            m = todo.pop()
            if m == start:
                cycles.append(start)
                break
            if m not in seen:
                seen.add(m)
                todo.extend(edges.get(m, ()))
    assert cycles == []


def test_no_module_over_the_line_budget():
    over = [
        f"{p.relative_to(SRC)} ({n} lines)"
        for p in sorted(SRC.rglob("*.py"))
        if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    ]
    assert over == []
