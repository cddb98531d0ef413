"""The page a sweep is compared on, in a real headless Chromium (tests/cdp.py): the best values and
goodput on the list, filter terms, what differs between runs, groups drawn as bands, the run's
recipe, provenance and memory chart.

The sweep is 12 RunLogger runs (3 recipes x 4 seeds) naming one data file; beside it a real
`runwatch supervise` with a rollback (goodput) and a run whose watchdog warned.
"""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from cdp import Browser
from runwatch.judging.verdict import Verdict, write_verdict
from serve_runs import Served, seeded_sweep, supervised
from test_serve_page import open_page, page_text_is_clean, shot

LRS = {"lr-a": 3e-3, "lr-b": 1e-2, "lr-c": 3e-2}
SEEDS = 4
STEPS = 200
WARNED = "sweep/lr-b-s2"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep") / "runs"
    data = root.parent / "train.bin"
    data.write_bytes(os.urandom(3 << 20))
    names = seeded_sweep(root / "sweep", LRS, SEEDS, STEPS, data=[str(data)])
    assert len(names) == 12
    supervised(root / "rolled", "spike@36")
    warning = {"kind": "overfitting", "step": 150, "message": "eval loss rose while the train loss fell"}
    write_verdict(str(root / WARNED), Verdict.done(STEPS, "session ended normally", time.time(), [warning]))
    return root


@pytest.fixture(scope="module")
def served(root):
    with Served(root) as s:
        for rel in [f"sweep/{n}-s{k}" for n in LRS for k in range(SEEDS)] + ["rolled"]:
            s.wait_run(rel, lambda r: r["step"] is not None and r["ended"] is not None, "ended")
        yield s


def records(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def ax(b: Browser) -> list[tuple[str, str]]:
    """(role, accessible name) of every node of the page's accessibility tree, as Chromium computes them."""
    nodes = b.call("Accessibility.getFullAXTree")["nodes"]
    return [((n.get("role") or {}).get("value", ""), (n.get("name") or {}).get("value", "")) for n in nodes]


def test_api_runs_carries_best_eval_loss_best_metric_and_goodput(served, root):
    runs = {r["path"]: r for r in served.json("/api/runs")["runs"]}
    for name in ("sweep/lr-a-s0", "sweep/lr-c-s3"):
        vals = [r for r in records(root / name) if r["event"] == "val"]
        loss = min(vals, key=lambda r: r["loss"])
        acc = max(vals, key=lambda r: r["metrics"]["accuracy"])
        assert runs[name]["best_eval_loss"] == {"value": loss["loss"], "step": loss["step"]}
        assert runs[name]["best_metric"] == {
            "value": acc["metrics"]["accuracy"],
            "step": acc["step"],
            "name": "accuracy",
            "direction": "max",
        }
        assert runs[name]["goodput_ratio"] is None and runs[name]["goodput"] is None  # not supervised
    with open(root / "rolled" / "supervise.jsonl") as f:
        journal = [json.loads(line) for line in f]
    ratio = journal[-1]["goodput"]["ratio"]
    # a time ratio (a tiny training's seconds among its launches' start-up: may round to 0.0 on a
    # loaded machine); the rollback redid steps
    assert 0 <= ratio < 1 and runs["rolled"]["goodput_ratio"] == ratio
    assert journal[-1]["goodput"]["steps_ratio"] < 1
    assert runs["rolled"]["goodput"] == journal[-1]["goodput"]  # the figure `status` shows
    assert "loss_spike" in runs["rolled"]["finding_kinds"]
    # how supervise launched it: launch.json's command and provenance, beside run.json's
    rolled = served.json("/api/run/rolled")
    with open(root / "rolled" / "launch.json") as f:
        launched = json.load(f)
    assert rolled["launch"] == {
        "command": launched["command"],
        "cwd": launched["cwd"],
        "provenance": launched["provenance"],
    }
    assert rolled["launch"]["provenance"]["argv"] == launched["command"] and launched["command"][1].endswith(
        "supervise_train.py"
    )
    assert runs[WARNED]["verdict"]["state"] == "ok"


def test_best_columns_sort_and_the_filter_takes_verdict_kind_and_warn_terms(served, chromium, tmp_path):
    with open_page(chromium, served.url, str(tmp_path / "profile"), size="1400,1200") as b:
        b.wait_for("document.querySelectorAll('tbody tr.run').length === 13")
        names = [(role, name.lower()) for role, name in ax(b)]  # (the style sets headers in capitals)
        for head in ("best eval loss", "best metric", "goodput"):
            assert ("columnheader", head) in names and ("button", head) in names, head
        assert ("searchbox", "filter runs by path, verdict:, kind: or warn:") in names
        visible = "Array.from(document.querySelectorAll('tbody tr.run')).filter(r => !r.hidden).map(r => r.getAttribute('data-path'))"
        api = {r["path"]: r for r in served.json("/api/runs")["runs"]}

        column = {"Best eval loss": 6, "Best metric": 7, "Goodput": 8}

        def sort_by(head: str, order: str) -> list[str]:
            th = f"thead th:nth-child({column[head]})"
            assert b.evaluate(f"document.querySelector('{th}').textContent") == head
            b.click(*b.center(f"{th} button"))
            b.wait_for(f"document.querySelector('{th}').getAttribute('aria-sort') === '{order}'")
            return b.evaluate(visible)

        by_loss = sort_by("Best eval loss", "ascending")
        values = [api[p]["best_eval_loss"]["value"] for p in by_loss if api[p]["best_eval_loss"]]
        assert values == sorted(values) and len(values) == 12
        assert by_loss[-1] == "rolled"  # no eval: last, whichever way
        by_metric = sort_by("Best metric", "ascending")
        values = [api[p]["best_metric"]["value"] for p in by_metric if api[p]["best_metric"]]
        assert values == sorted(values) and len(values) == 12 and by_metric[-1] == "rolled"
        by_metric = sort_by("Best metric", "descending")
        cells = b.evaluate(
            "Array.from(document.querySelectorAll('tbody tr.run')).map(r => r.querySelector('td[data-label=\"Best metric\"]').textContent)"
        )
        best = api[by_metric[0]]["best_metric"]
        assert cells[0] == f"accuracy {best['value']:.4g} @ {best['step']}"
        by_goodput = sort_by("Goodput", "ascending")  # (blank cells last, either way)
        assert by_goodput[0] == "rolled"
        goodput = b.evaluate(
            "Array.from(document.querySelectorAll('tbody tr.run')).map(r => r.querySelector('td[data-label=\"Goodput\"]').textContent)"
        )
        shown_ratio = math.floor(api["rolled"]["goodput_ratio"] * 1000 + 0.5) / 10  # as the page rounds (Math.round)
        assert goodput[0] == f"{shown_ratio:g} %" and set(goodput[1:]) == {""}

        def shown(text: str) -> list[str]:
            b.evaluate(
                f"(() => {{ const f = document.getElementById('filter'); f.value = {json.dumps(text)};"
                " f.dispatchEvent(new Event('input', {bubbles: true})); })()"
            )
            return sorted(b.evaluate(visible))

        assert shown("verdict:ok") == sorted(["rolled", WARNED])
        assert shown("verdict:none") == sorted(p for p in api if p not in ("rolled", WARNED))
        assert shown("verdict:anomaly") == [] and "No run matches" in b.evaluate(
            "document.querySelector('.empty').textContent"
        )
        assert shown("warn:overfitting") == [WARNED]
        assert shown("kind:loss_spike") == ["rolled"]
        assert shown("kind:loss_spike sweep") == []  # every term must match
        assert shown("VERDICT:NONE lr-c") == [f"sweep/lr-c-s{k}" for k in range(SEEDS)]
        assert shown("verdict:maybe") == []
        assert (
            b.evaluate("document.querySelector('.empty').textContent") == "verdict: takes ok, anomaly, running or none"
        )
        b.click(*b.center("input#filter"))
        b.evaluate("document.getElementById('filter').value = ''")
        b.type("warn:overfitting")  # typed, as a person does
        b.wait_for(f"JSON.stringify({visible}) === {json.dumps(json.dumps([WARNED]))}")
        page_text_is_clean(b)
        shot(b, "sweep-list")


def test_compare_shows_what_differs_and_groups_seeds_into_three_bands(served, chromium, tmp_path):
    names = [f"sweep/{n}-s{k}" for n in LRS for k in range(SEEDS)]
    url = served.url + "compare?" + "&".join("run=" + n for n in names)
    with open_page(chromium, url, str(tmp_path / "profile"), size="1400,1600") as b:
        b.wait_for("document.querySelectorAll('.legend .legend-item').length === 12")
        b.wait_for("!!document.querySelector('table.diff')")
        roles = ax(b)
        assert ("checkbox", "differences only") in roles and ("combobox", "group by") in roles
        assert b.evaluate("document.getElementById('diff-only').checked") is True  # on by default
        rows = "Array.from(document.querySelectorAll('table.diff tbody tr')).filter(r => !r.hidden).map(r => r.getAttribute('data-key'))"
        assert b.evaluate(rows) == ["recipe.lr", "recipe.seed"]  # the recipes differ there only
        lr_row = b.evaluate(
            "Array.from(document.querySelector('table.diff tr[data-key=\"recipe.lr\"]').querySelectorAll('td')).map(t => t.textContent)"
        )
        assert lr_row == [str(lr) for lr in LRS.values() for _ in range(SEEDS)]
        # every row, with a real click on the box: provenance too, the same in every run
        b.click(*b.center("#diff-only"))
        b.wait_for("!document.getElementById('diff-only').checked")
        keys = b.evaluate(rows)
        for key in (
            "recipe.batch_size",
            "provenance.git commit",
            "provenance.python",
            "provenance.host",
            "provenance.argv",
        ):
            assert key in keys, (key, keys)
        data_rows = [k for k in keys if k.startswith("data.")]
        assert len(data_rows) == 1 and data_rows[0].endswith("train.bin")
        assert b.evaluate("document.querySelectorAll('table.diff tr.differs').length") == 2
        b.evaluate("document.getElementById('diff-only').focus()")
        b.key(" ", "Space", 32)  # and on again with the keyboard
        b.wait_for(f"({rows}).length === 2")

        # the train loss's bands (the loss chart has the eval loss's too)
        bands = 'document.querySelectorAll(\'figure[data-chart="loss"] polygon.group-band[data-key="loss"]\').length'
        assert b.evaluate(bands) == 0  # grouping is off until chosen
        options = b.evaluate("Array.from(document.getElementById('groupby').options).map(o => o.value)")
        assert options[:2] == ["", "seed"] and "lr" in options and "seed" not in options[2:]
        b.evaluate("document.getElementById('groupby').focus()")
        b.key("ArrowDown", "ArrowDown", 40)  # the keyboard picks "seed"
        b.wait_for("document.getElementById('groupby').value === 'seed'")
        b.wait_for(f"{bands} === 3")
        legend = b.evaluate("Array.from(document.querySelectorAll('.legend .legend-item')).map(x => x.textContent)")
        assert legend == [f"lr={lr} (4 runs)" for lr in LRS.values()]
        assert b.evaluate(bands.replace('data-key="loss"', 'data-key="eval_loss"')) == 3
        for chart in ("lr", "eval_accuracy", "memory"):
            assert (
                b.evaluate(f"document.querySelectorAll('figure[data-chart=\"{chart}\"] polygon.group-band').length")
                == 3
            )
            assert b.evaluate(f"document.querySelectorAll('figure[data-chart=\"{chart}\"] polyline.group').length") == 3
        ticks = b.evaluate(
            "Array.from(document.querySelectorAll('figure[data-chart=\"memory\"] .tick.y')).map(t => t.textContent)"
        )
        assert ticks and all(t.endswith(("KiB", "MiB", "GiB")) for t in ticks), ticks
        # the mean line of a group lies inside its band; the lr band has no width (one lr a group)
        lines = b.evaluate(
            "Array.from(document.querySelectorAll('figure[data-chart=\"lr\"] polyline.group')).map(p => p.getAttribute('points'))"
        )
        assert all(len({xy.split(",")[1] for xy in pts.split()}) == 1 for pts in lines)
        std = b.evaluate(
            "Array.from(document.querySelectorAll('figure[data-chart=\"loss\"] polygon.group-band')).map(p => p.getAttribute('points'))"
        )
        assert len(std) == 6
        b.evaluate(
            "(() => { const x = document.getElementById('band'); x.value = 'minmax';"
            " x.dispatchEvent(new Event('change', {bubbles: true})); })()"
        )
        b.wait_for(
            "Array.from(document.querySelectorAll('figure[data-chart=\"loss\"] polygon.group-band')).map(p => p.getAttribute('points')).join('|') !== "
            + json.dumps("|".join(std))
        )
        # hide a group from its legend entry, by a real click
        b.click(*b.center(".legend li:nth-child(2) .legend-item"))
        b.wait_for(f"{bands} === 2")
        page_text_is_clean(b)
        shot(b, "sweep-compare-groups")
        # grouped by the chosen key (lr): the same three groups, named by it
        b.evaluate(
            "(() => { const x = document.getElementById('groupby'); x.value = 'lr';"
            " x.dispatchEvent(new Event('change', {bubbles: true})); })()"
        )
        b.wait_for("document.querySelector('.legend .legend-item .name').textContent.startsWith('lr=')")
        # and off again: one line a run
        b.evaluate(
            "(() => { const x = document.getElementById('groupby'); x.value = '';"
            " x.dispatchEvent(new Event('change', {bubbles: true})); })()"
        )
        b.wait_for("document.querySelectorAll('.legend .legend-item').length === 12")
        assert b.evaluate(bands) == 0


def test_the_run_page_shows_recipe_provenance_and_memory(served, root, chromium, tmp_path):
    with open_page(chromium, served.url + "run/sweep/lr-a-s1", str(tmp_path / "profile")) as b:
        b.wait_for(
            "!!document.querySelector('table.origin') && !!document.querySelector('figure[data-chart=\"memory\"] polyline')"
        )
        rows = dict(
            b.evaluate(
                "Array.from(document.querySelectorAll('table.origin tr')).map(r => [r.querySelector('th').textContent, r.querySelector('td').textContent])"
            )
        )
        with open(root / "sweep" / "lr-a-s1" / "run.json") as f:
            p = json.load(f)["sessions"][-1]["provenance"]
        assert rows["seed"] == "1" and rows["lr"] == "0.003" and rows["qk_clip_threshold"] == "–"
        assert rows["argv"] == " ".join(p["argv"]) and rows["python"] == p["python"]
        assert rows["torch"] == (p["torch"] or "–")  # (a version when the process had imported torch)
        assert rows["git commit"] == (p["git"]["commit"] if p["git"] else "not in a git repository")
        data = p["data"][0]
        assert rows["data " + data["path"]].startswith(f"sha256 {data['sha256'][:12]} · 3 MiB · modified ")
        ticks = b.evaluate(
            "Array.from(document.querySelectorAll('figure[data-chart=\"memory\"] .tick.y')).map(t => t.textContent)"
        )
        assert ticks and all(t.endswith(("KiB", "MiB", "GiB")) for t in ticks), ticks
        assert (
            b.evaluate("document.querySelector('figure[data-chart=\"memory\"] .chart-title').textContent")
            == "memory peaks"
        )
        page_text_is_clean(b)
        shot(b, "sweep-run")
