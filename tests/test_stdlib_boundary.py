"""The core imports only the standard library: proved under `python -S` (no site-packages)."""

from __future__ import annotations

import os
import subprocess
import sys

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
# The modules the logger, the auditor and the watchdog need.
CORE = [
    "runwatch",
    "runwatch.errors",
    "runwatch.files.schema",
    "runwatch.files.jsonio",
    "runwatch.logger.metrics",
    "runwatch.files.journal",
    "runwatch.judging.summary",
    "runwatch.cli",
    "runwatch.reading.follow",
    "runwatch.reading.records",
    "runwatch.reading.parsing",
    "runwatch.reading.target",
    "runwatch.reading.source",
    "runwatch.judging.rules",
    "runwatch.judging.ruleset",
    "runwatch.judging.evalrules",
    "runwatch.judging.progress",
    "runwatch.judging.declaring",
    "runwatch.judging.rulebase",
    "runwatch.judging.sessionrules",
    "runwatch.judging.lossrules",
    "runwatch.judging.gradrules",
    "runwatch.judging.throughput",
    "runwatch.judging.rankrules",
    "runwatch.judging.runbook",
    "runwatch.judging.watchdog",
    "runwatch.views.status",
    "runwatch.views.plotdata",
    "runwatch.files.heartbeats",
    "runwatch.logger.distributed",
    "runwatch.supervising.launch",
    "runwatch.procs.process",
    "runwatch.procs.proctree",
    "runwatch.procs.waiter",
    "runwatch.supervising.supervision",
    "runwatch.supervising.supervise",
    "runwatch.supervising.preemption",
    "runwatch.supervising.goodput",
    "runwatch.supervising.scheduler",
    "runwatch.supervising.deadman",
    "runwatch.supervising.notify",
    "runwatch.reading.resume",
    "runwatch.logger.convert",
    "runwatch.logger.window",
    "runwatch.logger.signals",
    "runwatch.files.hardware",
    "runwatch.files.recipe",
    "runwatch.reading.readers",
    "runwatch.reading.readers.keys",
    "runwatch.reading.readers.tfevents",
    "runwatch.reading.readers.tfrecord",
    "runwatch.reading.readers.mlflowstore",
    "runwatch.reading.readers.csvlog",
    "runwatch.reading.readers.textlog",
    "runwatch.reading.readers.jsonl",
    "runwatch.reading.readers.trainerstate",
]
# `runwatch mcp`'s tools (the SDK is imported by runwatch.views.agent.server and the answers and waits it imports) and the runbook.
CORE += [
    "runwatch.judging.runbook",
    "runwatch.views.agent",
    "runwatch.views.agent.tools",
    "runwatch.views.agent.act",
    "runwatch.views.agent.tail",
    "runwatch.views.agent.verdicts",
    "runwatch.views.agent.bound",
]
# `runwatch serve`: http.server and the readers, nothing else.
CORE += [
    "runwatch.views.serve",
    "runwatch.views.serve.server",
    "runwatch.views.serve.runs",
    "runwatch.views.serve.series",
    "runwatch.views.serve.supervision",
]


def test_core_imports_only_the_standard_library():
    present = CORE
    code = (
        "import sys\n"
        f"sys.path.insert(0, {SRC!r})\n"
        f"for m in {present!r}: __import__(m)\n"
        "foreign = sorted(n for n, m in sys.modules.items() if n.split('.')[0] not in sys.stdlib_module_names\n"
        "                 and n.split('.')[0] not in ('runwatch', '__main__'))\n"
        "print(foreign)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env={"PATH": os.environ.get("PATH", "")}
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_public_api():
    import runwatch

    assert sorted(runwatch.__all__) == sorted(
        [
            "RunLogger",
            "summarize",
            "resume_checkpoint",
            "verify_checkpoint",
            "RunwatchError",
            "InvalidRunError",
            "NonFiniteLossError",
            "RunLockedError",
            "UsageError",
            "ConfigError",
            "LogWriteError",
            "NotRegularFileError",
            "UnsafeWriteError",
            "RanksOutOfStepError",
            "InsufficientRunError",
            "DataError",
            "CheckpointError",
            "StoreLockedError",
            "Terminated",
            "__version__",
        ]
    )


def test_every_error_of_the_tree_is_exported():
    """Every exception class of runwatch.errors can be caught by its name from `runwatch`."""
    import runwatch
    from runwatch import errors

    classes = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)}
    exported = {n for n in runwatch.__all__ if isinstance(getattr(runwatch, n), type)}
    assert classes == {n for n in exported if issubclass(getattr(runwatch, n), BaseException)}
    for name in classes:
        assert getattr(runwatch, name) is getattr(errors, name)
        assert issubclass(getattr(errors, name), (errors.RunwatchError, KeyboardInterrupt))
