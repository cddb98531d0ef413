"""The agent skill: its front matter and body as the Agent Skills spec asks, its references and
evals, the plugin manifest, `runwatch skill --install`, and its code blocks run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from runwatch.cli import main
from runwatch.judging.runbook import markdown_table
from runwatch.views.agent import SKILL_NAME, skill_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKILL_DIR = os.path.join(REPO, "skills", SKILL_NAME)
TRIGGER_WORDS = ("train.py", "fine-tune", "torchrun", "sbatch", "NaN", "loss spike", "OOM", "resume")


def _read(rel: str) -> str:
    with open(os.path.join(SKILL_DIR, rel), encoding="utf-8") as f:
        return f.read()


def _front(text: str) -> tuple[dict[str, str], str]:
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m is not None
    return dict(line.split(": ", 1) for line in m.group(1).splitlines()), m.group(2)


def test_one_source_front_matter_and_body():
    assert os.path.realpath(SKILL_DIR) == os.path.realpath(
        os.path.join(REPO, "src", "runwatch", "views", "agent", SKILL_NAME)
    )
    text = _read("SKILL.md")
    assert skill_text() == text
    fields, body = _front(text)
    assert set(fields) == {"name", "description", "compatibility"}
    assert fields["name"] == os.path.basename(SKILL_DIR) == SKILL_NAME
    assert 50 < len(fields["description"]) <= 1024 and fields["description"].startswith("Train")
    assert "Use when" in fields["description"]
    for word in TRIGGER_WORDS:
        assert word.lower() in fields["description"].lower(), word
    assert len(body.splitlines()) < 500
    for section in ("## Gotchas", "## Report to the person", "## The minimal JSONL fields", "resume contract"):
        assert section.replace("## The minimal", "### The minimal") in body or section in body
    for gotcha in ("logging_nan_inf_filter", "SIGTERM to `supervise`", "--stall", "--pattern", "timeout_s", "--act"):
        assert gotcha in body.split("## Gotchas")[1].split("## Report")[0], gotcha
    for field in ("`step`", "`loss`", "`t`", "`sps`", "`eval_loss`", "samples per second"):
        assert field in body
    named = re.findall(r"`(references/[\w.-]+)`", body)
    assert sorted(set(named)) == sorted(f"references/{n}" for n in os.listdir(os.path.join(SKILL_DIR, "references")))


def test_every_command_the_skill_names_exists():
    from runwatch.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    body = _read("SKILL.md")
    named = set(re.findall(r"(?:`|^ *|nohup )runwatch ([a-z][a-z-]+)", body, re.M))
    assert named - commands == set()
    assert {"bench", "plan", "audit-data", "subsample", "smoke", "supervise", "wait"} <= named


def test_verdicts_reference_is_the_runbook():
    assert markdown_table() in _read("references/verdicts.md")


def test_evals():
    doc = json.loads(_read("evals/evals.json"))
    assert doc["skill_name"] == SKILL_NAME
    triggers = doc["trigger_evals"]
    assert len(triggers) >= 16
    yes = [t for t in triggers if t["should_trigger"]]
    assert len(yes) * 2 == len(triggers)
    assert len(doc["evals"]) >= 3
    names = {e["name"] for e in doc["evals"]}
    assert {"broken-data-file", "inverted-metric", "crash-mid-run"} <= names
    assert all(e["prompt"] and e["expectations"] for e in doc["evals"])


def test_plugin_manifest_and_mcp_entry():
    with open(os.path.join(REPO, ".claude-plugin", "plugin.json"), encoding="utf-8") as f:
        plugin = json.load(f)
    assert plugin["name"] == "runwatch"
    assert os.path.isdir(os.path.join(REPO, plugin["skills"], SKILL_NAME))
    with open(os.path.join(REPO, plugin["mcpServers"]), encoding="utf-8") as f:
        servers = json.load(f)["mcpServers"]
    assert servers["runwatch"] == {"type": "stdio", "command": "runwatch", "args": ["mcp"]}


def test_install(tmp_path, capsys):
    dest = tmp_path / "skills"
    assert main(["skill", "--install", str(dest)]) == 0
    assert capsys.readouterr().out == f"wrote {dest / SKILL_NAME} (5 files)\n"
    got = sorted(
        os.path.relpath(os.path.join(d, n), dest / SKILL_NAME) for d, _, ns in os.walk(dest / SKILL_NAME) for n in ns
    )
    assert got == [
        "SKILL.md",
        "evals/evals.json",
        "references/instrumenting.md",
        "references/schedulers.md",
        "references/verdicts.md",
    ]
    assert (dest / SKILL_NAME / "SKILL.md").read_text() == _read("SKILL.md")
    (dest / SKILL_NAME / "stale.md").write_text("old")
    assert main(["skill", "--install", str(dest)]) == 0  # replaced as a whole
    assert not (dest / SKILL_NAME / "stale.md").exists()
    (tmp_path / "file").write_text("x")
    assert main(["skill", "--install", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"skill --install: {tmp_path / 'file'}: not a directory")


def _python_blocks() -> list[tuple[str, str]]:
    out = []
    for rel in ["SKILL.md"] + [f"references/{n}" for n in sorted(os.listdir(os.path.join(SKILL_DIR, "references")))]:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", _read(rel), re.S)):
            out.append((f"{rel}#{i}", block))
    return out


BLOCKS = _python_blocks()


@pytest.mark.parametrize("name, code", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_code_blocks_run_as_written(tmp_path, name, code):
    """Each block runs as a program in an empty folder, twice (the second time it resumes), and what
    it logs is a valid run that `runwatch check` judges."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWATCH_")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    script = tmp_path / "block.py"
    script.write_text(code)
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
    runs = tmp_path / "runs"
    assert runs.is_dir()
    for run in runs.iterdir():
        logs = [p for p in run.rglob("metrics.jsonl")]
        assert logs, f"{name}: no log in {run}"
        assert main(["check", str(logs[0].parent)]) == 0
