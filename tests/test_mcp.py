"""`runwatch mcp` over stdio, driven by the MCP Python SDK's own client (stdio_client + ClientSession),
against real runs: a live `runwatch watch` of a real PyTorch training (the demo's tinytrain) whose
loss goes NaN, live `runwatch supervise` runs of a small RunLogger loop (tests/supervise_train.py)
started through `launch_supervised`, every tool, the 8 KB bound, confinement to ROOT, errors that
leave the server serving, and a server without --act that starts, stops and writes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("mcp", reason="runwatch[mcp] is not installed")

import anyio  # noqa: E402 - after the skip: the SDK's dependency
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from runwatch.procs.process import alive  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(TESTS), "src")
TRAIN = os.path.join(TESTS, "supervise_train.py")
READ_TOOLS = [
    "list_runs",
    "run_status",
    "tail_records",
    "check_run",
    "wait_for_verdict",
    "explain",
    "plan_run",
    "get_series",
    "incident",
    "wait_for_event",
    "compare_runs",
]
# Generous: two shared cores, torch starting in a subprocess, a server starting per test.
WAIT = 240.0


def minimal_log(path: str, steps: range, nan_at: int | None = None) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as f:
        for s in steps:
            f.write(
                json.dumps({"step": s, "t": 1000.0 + s, "loss": float("nan") if s == nan_at else 1.0 / s, "sps": 50.0})
                + "\n"
            )


class Client:
    """One `runwatch mcp` server and the SDK's client session to it; every result is checked
    against the contract's bound (8192 bytes, structured content included) as it arrives."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def raw(self, name: str, **args: Any) -> Any:
        res = await self.session.call_tool(name, args)
        assert len(res.model_dump_json(by_alias=True, exclude_none=True).encode()) <= 8192, name
        return res

    async def call(self, name: str, **args: Any) -> dict[str, Any]:
        res = await self.raw(name, **args)
        assert not res.is_error, res.content[0].text
        doc = json.loads(res.content[0].text, parse_constant=lambda c: pytest.fail(f"{c} in {name}'s JSON"))
        assert res.structured_content == doc
        return doc

    async def error(self, name: str, **args: Any) -> str:
        res = await self.raw(name, **args)
        assert res.is_error, res.content
        return str(res.content[0].text)


def serve(root: Any, *args: str, body: Callable[[Client], Awaitable[Any]], errlog: Any = None) -> Any:
    """Start `runwatch mcp ROOT ARGS` over stdio, run `body` with a client, close the server."""

    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "runwatch", "mcp", str(root), *args],
            env={"PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"},
            cwd=str(root),
        )
        log = errlog or open(os.devnull, "w")
        try:
            async with stdio_client(params, errlog=log) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await body(Client(session))
        finally:
            if errlog is None:
                log.close()

    return anyio.run(main)


@pytest.fixture
def reaper():
    """Process groups a test started; whatever is left of them is killed at its end."""
    groups: list[int] = []
    yield groups
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def tree(root: Any) -> dict[str, tuple[int, int]]:
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return out


def test_every_read_tool_errors_keep_it_serving_and_nothing_is_written(tmp_path):
    root = tmp_path / "root"
    minimal_log(str(root / "runs" / "a" / "metrics.jsonl"), range(1, 41))
    minimal_log(str(root / "runs" / "nan" / "metrics.jsonl"), range(1, 21), nan_at=15)
    for i in range(60):
        minimal_log(str(root / "sweep" / f"r{i:02d}" / "metrics.jsonl"), range(1, 4))
    (tmp_path / "outside").mkdir()
    minimal_log(str(tmp_path / "outside" / "metrics.jsonl"), range(1, 4))
    os.symlink(tmp_path / "outside", root / "out")
    os.makedirs(root / "text")
    with open(root / "text" / "train.out", "w") as f:
        f.writelines(f"epoch {e} loss={2.0 - e / 10:.2f}\n" for e in range(1, 8))
    pattern = ["--pattern", r"^epoch (?P<step>\d+) loss=(?P<loss>\S+)"]
    real = os.path.realpath(root)
    errlog = open(tmp_path / "server.err", "w")

    async def body(c: Client) -> None:
        names = [t.name for t in (await c.session.list_tools()).tools]
        assert names == READ_TOOLS  # no launch_supervised, no stop_run without --act
        before = tree(root)
        runs = await c.call("list_runs")
        assert runs["total"] == 62 and len(runs["runs"]) <= 50  # (the text log needs --pattern: not a run)
        assert runs["runs"][0]["path"] == "runs/nan" and runs["runs"][0]["findings"] == 1  # trouble first
        status = await c.call("run_status", run="runs/a")
        assert status["step"] == 40 and status["watchdog"] is None and status["run"] == "runs/a"
        tail = await c.call("tail_records", run="runs/a", n=5000)
        assert tail["n"] == 200 and tail["clamped"] == "n 5000 clamped to 200"
        assert 0 < len(tail["records"]) <= 200 and tail["records"][-1]["step"] == 40
        # a log that needs reading options: run_status and tail_records take them as check_run does
        text_status = await c.call("run_status", run="text", options=pattern)
        assert (text_status["step"], text_status["loss"], text_status["log"]) == (
            7,
            1.3,
            str(root / "text" / "train.out"),
        )
        text_tail = await c.call("tail_records", run="text/train.out", n=2, options=pattern)
        assert [(r["step"], r["loss"]) for r in text_tail["records"]] == [(6, 1.4), (7, 1.3)]
        assert text_tail["format"] == "text"
        checked = await c.call("check_run", run="runs/nan", options=["--metric", "acc"])
        assert checked["exit"] == 7 and checked["verdict"].startswith("ANOMALY nonfinite_loss step=15: ")
        assert checked["findings"][0]["class"] == "divergence" and checked["findings"][0]["onset"] == 15
        waited = await c.call("wait_for_verdict", run="runs/a", timeout_s=1e9)
        assert waited["state"] == "unwatched" and waited["waited_seconds"] < 5
        assert waited["clamped"] == "timeout_s 1000000000.0 clamped to 3600"
        explained = await c.call("explain", kind="stall")
        assert explained["class"] == "transient"
        planned = await c.call("plan_run", run="runs/a", samples=100, window="2h")
        assert planned["exit"] in (0, 1) and planned["meaning"] in ("fits", "does not fit")
        # refusals and run errors: one line each, and the server goes on serving
        errors = [
            await c.error("run_status", run="../outside"),
            await c.error("run_status", run=str(tmp_path / "outside")),
            await c.error("tail_records", run="out"),
            await c.error("check_run", run="runs/none"),
            await c.error("explain", kind="sadness"),
            await c.error("list_runs", under="/"),
            await c.error("check_run", run="runs/a", options=["--help"]),
            await c.error("check_run", run="runs/a", options=["--grad-max", "-1"]),
            await c.error("run_status", run="text", options=["--format", "zip"]),
            await c.error("tail_records", run="text", options=["--chance-loss", "0.693"]),
            await c.error("run_status", run="runs", options=["--format", "nanogpt"]),
        ]
        assert errors[:4] == [
            f"run_status: ../outside: '..' is not allowed; give a path inside {real}",
            f"run_status: {tmp_path / 'outside'}: outside {real}",
            f"tail_records: out: outside {real}",
            f"check_run: runs/none: no such run under {real}",
        ]
        assert all("\n" not in e and "Traceback" not in e for e in errors)
        assert errors[8].startswith("run_status: ") and "zip" in errors[8]
        assert errors[9].startswith("tail_records: ") and "--chance-loss" in errors[9]
        assert errors[10] == f"--format nanogpt: {root / 'runs'} holds no single such log; give the file"
        # bad argument types and unknown tools: as the SDK reports them
        assert "validation error" in await c.error("tail_records", run="runs/a", n="many")
        assert "Unknown tool: stop_run" in await c.error("stop_run", run="runs/a")
        assert "Unknown tool: launch_supervised" in await c.error("launch_supervised", run_dir="x", command=["true"])
        assert (await c.call("explain", kind="done"))["class"] is None  # still serving
        assert tree(root) == before  # nothing was written under ROOT

    serve(root, body=body, errlog=errlog)
    errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def test_wait_for_verdict_wakes_on_a_live_watch_of_a_real_training_whose_loss_goes_nan(tmp_path, reaper):
    pytest.importorskip("torch")
    root = tmp_path
    run = root / "tiny"
    train = [sys.executable, "-m", "runwatch.demo.tinytrain", str(run), "--steps", "600", "--step-sleep", "0.01"]
    train += ["--inject", "nan", "--inject-at", "120"]
    launched = subprocess.run(
        [sys.executable, "-m", "runwatch", "launch", str(run), "--", *train], capture_output=True, text=True
    )
    assert launched.returncode == 0, launched.stderr
    pid = int((run / "pid").read_text())
    reaper.append(pid)
    watch = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "watch", str(run), "--poll", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    reaper.append(watch.pid)

    async def body(c: Client) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT
        while (await c.call("wait_for_verdict", run="tiny", timeout_s=0))["state"] == "unwatched":
            assert time.monotonic() < deadline, "the watch never wrote its watching record"
            await anyio.sleep(0.2)
        watching = await c.call("run_status", run="tiny")
        assert watching["watchdog"]["verdict"] in ("watching", "anomaly")
        waited = await c.call("wait_for_verdict", run="tiny", timeout_s=WAIT)
        returned = time.time()
        waited["returned_at"] = returned
        return waited

    waited = serve(root, body=body)
    out, _ = watch.communicate(timeout=WAIT)
    assert watch.returncode == 7
    assert waited["state"] == "final" and waited["by"] == "watch"
    assert waited["verdict"]["kind"] == "nonfinite_loss" and waited["verdict"]["class"] == "divergence"
    assert waited["line"] == out.strip().splitlines()[-1]  # the watch's own verdict line
    # woken when the verdict was written, not at the timeout (~1 s by contract; slack for a loaded machine)
    assert waited["returned_at"] - waited["verdict"]["time"] < 10
    assert waited["waited_seconds"] < WAIT - 10


def test_supervise_a_nan_relaunch_is_not_final_its_end_is(tmp_path, reaper):
    root = tmp_path

    async def body(c: Client) -> tuple[dict[str, Any], ...]:
        names = [t.name for t in (await c.session.list_tools()).tools]
        assert names == [*READ_TOOLS, "launch_supervised", "stop_run"]
        cmd = [sys.executable, TRAIN, "runs/rb", "--steps", "60", "--sleep", "0.03", "--fault", "nan@25"]
        started = await c.call("launch_supervised", run_dir="runs/rb", command=cmd, options=["--poll", "0.2"])
        reaper.append(started["pid"])
        assert started["run_dir"] == "runs/rb" and alive(started["pid"])
        done = await c.call("wait_for_verdict", run="runs/rb", timeout_s=WAIT)
        status = await c.call("run_status", run="runs/rb")
        # no checkpoint to roll back to: the supervisor gives up, and that is final
        cmd = [sys.executable, TRAIN, "runs/gu", "--steps", "60", "--sleep", "0.03", "--fault", "nan@5"]
        started = await c.call("launch_supervised", run_dir="runs/gu", command=cmd, options=["--poll", "0.2"])
        reaper.append(started["pid"])
        gave_up = await c.call("wait_for_verdict", run="runs/gu", timeout_s=WAIT)
        refused = [
            await c.error("launch_supervised", run_dir="../x", command=["true"]),
            await c.error("launch_supervised", run_dir="runs/bad", command=["true"], options=["--restarts", "-1"]),
            await c.error("launch_supervised", run_dir="runs/bad", command=[]),
        ]
        return done, status, gave_up, tuple(refused)

    done, status, gave_up, refused = serve(root, "--act", body=body)
    assert done["state"] == "final" and done["by"] == "supervise" and done["event"] == "done"
    assert done["line"] == "OK done step=60" and done["exit"] == 0
    with open(root / "runs" / "rb" / "supervise.jsonl") as f:
        events = [json.loads(line) for line in f]
    assert [(e["event"], e["kind"]) for e in events if e["event"] in ("verdict", "rollback")] == [
        ("verdict", "nonfinite_loss"),
        ("rollback", None),
        ("verdict", None),  # OK done
    ]
    assert status["supervise"]["rollbacks"] == 1 and status["supervise"]["event"] == "done"
    assert [a["how"] for a in status["supervision"]["attempts"]] == ["launch", "rollback"]
    assert gave_up["event"] == "gave_up" and gave_up["verdict"]["kind"] == "nonfinite_loss"
    assert gave_up["line"].startswith("ANOMALY nonfinite_loss step=")
    assert gave_up["exit"] == 7  # no checkpoint to roll back to: fatal
    assert refused[0].startswith("launch_supervised: ../x: '..' is not allowed")
    assert refused[1] == "launch_supervised: supervise.restarts must be an int >= 0, got -1"
    assert refused[2].startswith("launch_supervised: command must be a non-empty list of strings")
    assert not (root / "runs" / "bad").exists()  # refused before anything was started or written


def test_a_launched_supervisor_outlives_the_server_and_stop_run_stops_it(tmp_path, reaper):
    root = tmp_path
    cmd = [sys.executable, TRAIN, "runs/long", "--steps", "100000", "--sleep", "0.05"]

    async def launch(c: Client) -> dict[str, Any]:
        return await c.call("launch_supervised", run_dir="runs/long", command=cmd, options=["--poll", "0.5"])

    started = serve(root, "--act", body=launch)
    sup = started["pid"]
    reaper.append(sup)
    time.sleep(1.0)  # the server is gone; its supervisor is not
    assert alive(sup)
    train = int((root / "runs" / "long" / "pid").read_text())
    reaper.append(train)
    assert alive(train)

    async def stop(c: Client) -> tuple[dict[str, Any], dict[str, Any]]:
        again = await c.error("launch_supervised", run_dir="runs/long", command=cmd)
        assert again == f"launch_supervised: runs/long: supervisor {sup} is already running there"
        stopped = await c.call("stop_run", run="runs/long")
        waited = await c.call("wait_for_verdict", run="runs/long", timeout_s=5)
        return stopped, waited

    stopped, waited = serve(root, "--act", body=stop)
    assert not alive(sup) and not alive(train)
    assert stopped["stopped"].startswith(f"supervisor {sup} stopped the training and exited")
    assert stopped["process"] == {"pid": train, "alive": False}
    assert stopped["supervise"]["event"] == "gave_up" and stopped["ended"]["reason"] == "interrupted"
    assert waited["state"] == "final" and waited["verdict"]["kind"] == "interrupted" and waited["exit"] == 130


def test_evidence_tools_and_events_across_a_server_restart(tmp_path, reaper):
    """A supervised run that goes NaN and is rolled back: wait_for_event gives its stop, rollback,
    checkpoints and end, each once, with a cursor that a new server (a restart) continues from;
    get_series keeps the spike's non-finite values apart; incident and compare_runs in one call
    each; every tool declares an outputSchema and each result matches it."""
    import jsonschema

    root = tmp_path
    schemas: dict[str, Any] = {}
    os.makedirs(root / "spiky")
    with open(root / "spiky" / "metrics.jsonl", "w") as f:
        for s in range(1, 1001):
            loss = 50.0 if s == 500 else float("nan") if s == 700 else 1.0 / s
            f.write(json.dumps({"step": s, "t": 1000.0 + s, "loss": loss, "sps": 50.0}) + "\n")

    async def first(c: Client) -> dict[str, Any]:
        for tool in (await c.session.list_tools()).tools:
            assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
            assert "\n" not in (tool.description or "") and "  " not in (tool.description or ""), tool.name
            schemas[tool.name] = tool.output_schema
        for run, fault in (("runs/rb", "nan@25"), ("runs/ok", None)):
            cmd = [sys.executable, TRAIN, run, "--steps", "60", "--sleep", "0.02"] + (
                ["--fault", fault] if fault else []
            )
            started = await c.call("launch_supervised", run_dir=run, command=cmd, options=["--poll", "0.2"])
            reaper.append(started["pid"])
        events: list[dict[str, Any]] = []
        cursor = None
        while not any(e["kind"] in ("done", "gave_up") for e in events):
            got = await c.call("wait_for_event", run="runs/rb", since=cursor, timeout_s=WAIT)
            jsonschema.validate(got, schemas["wait_for_event"])
            assert not got.get("timed_out"), got
            events += got["events"]
            cursor = got["cursor"]
        await c.call("wait_for_verdict", run="runs/ok", timeout_s=WAIT)
        docs = {
            "get_series": await c.call("get_series", run="runs/rb", keys=["loss", "lr"], max_points=8),
            "incident": await c.call("incident", run="runs/rb", compare="runs/ok"),
            "compare_runs": await c.call("compare_runs", runs=["runs/rb", "runs/ok"]),
            "only_warnings": await c.call("wait_for_event", run="runs/rb", kinds=["warning"], timeout_s=0.2),
            "spiky": await c.call("get_series", run="spiky", keys=["loss", "sps"], max_points=10),
        }
        for name in ("get_series", "incident", "compare_runs"):
            jsonschema.validate(docs[name], schemas[name])
        for name, args in (
            ("list_runs", {}),
            ("run_status", {"run": "runs/rb"}),
            ("tail_records", {"run": "runs/rb"}),
            ("check_run", {"run": "runs/rb"}),
            ("explain", {"kind": "loss_spike"}),
        ):
            jsonschema.validate(await c.call(name, **args), schemas[name])
        errors = [
            await c.error("wait_for_event", run="runs/rb", since="not-a-cursor", timeout_s=0),
            await c.error("wait_for_event", run="runs/rb", kinds=["nope"], timeout_s=0),
            await c.error("compare_runs", runs=["runs/rb"]),
        ]
        return {"events": events, "cursor": cursor, "errors": errors, **docs}

    out = serve(root, "--act", body=first)
    kinds = [e["kind"] for e in out["events"]]
    assert kinds.count("done") == 1 and kinds.count("rollback") == 1 and kinds.count("stop") == 1
    stop = next(e for e in out["events"] if e["kind"] == "stop")
    assert stop["what"] == "nonfinite_loss" and stop["source"] == "supervise.jsonl"
    assert kinds.index("stop") < kinds.index("rollback") < kinds.index("done")
    assert "checkpoint" in kinds  # the log's checkpoint records
    keys = [(e["kind"], e.get("step"), e.get("what")) for e in out["events"]]
    assert len(keys) == len(set(keys))  # each once
    assert out["only_warnings"]["events"] == [] and out["only_warnings"]["timed_out"] is True
    assert out["errors"][0].startswith("wait_for_event: not a cursor of this run's events: 'not-a-cursor'")
    assert out["errors"][1].startswith("wait_for_event: unknown event kind 'nope'; known: warning, stop")
    assert out["errors"][2].startswith("compare_runs: runs must be a list of 2 to 8 runs")

    series = out["get_series"]
    buckets = series["series"]["loss"]
    assert 1 <= len(buckets) <= 8 and all(len(b) == 5 and b[0] <= b[1] and b[2] <= b[4] <= b[3] for b in buckets)
    assert [b[0] for b in buckets] == sorted(b[0] for b in buckets)
    spiky = out["spiky"]  # 1000 records, a spike at step 500, a NaN at 700, in 10 buckets
    assert spiky["steps"] == [1, 1000] and spiky["records"] == 1000
    assert len(spiky["series"]["loss"]) == 10
    assert max(b[3] for b in spiky["series"]["loss"]) == 50.0  # the spike is never sampled away
    assert spiky["nonfinite"] == {"loss": {"count": 1, "first_steps": [700]}}
    assert spiky["series"]["sps"][0][2:] == [50.0, 50.0, 50.0]

    inc = out["incident"]
    assert inc["verdict"]["kind"] == "nonfinite_loss" and inc["verdict"]["class"] == "divergence"
    assert inc["before"] and all(r["step"] < inc["verdict"]["onset"] for r in inc["before"])
    assert len(inc["before"]) <= 10 and len(inc["after"]) <= 10
    assert inc["checkpoints"] and all(c["step"] <= inc["verdict"]["onset"] for c in inc["checkpoints"])
    assert inc["argv"][1:3] == [TRAIN, "runs/rb"] and inc["output"]
    assert "argv" in {k.split(".")[0] for k in inc["compare"]["differs"]}

    cmp = out["compare_runs"]
    assert [r["run"] for r in cmp["runs"]] == ["runs/rb", "runs/ok"]
    assert cmp["differs"]["argv"][0] != cmp["differs"]["argv"][1]
    assert all("git" in r and "versions" in r and "recipe" in r for r in cmp["runs"])

    async def restarted(c: Client) -> tuple[dict[str, Any], dict[str, Any]]:
        again = await c.call("wait_for_event", run="runs/rb", since=out["cursor"], timeout_s=0.5)
        everything = await c.call("wait_for_event", run="runs/rb", timeout_s=0)
        return again, everything

    again, everything = serve(root, body=restarted)  # a new server: nothing is given twice, nothing lost
    assert again["events"] == [] and again["timed_out"] is True and again["cursor"] == out["cursor"]
    assert [e["kind"] for e in everything["events"]] == kinds
