"""runwatch.judging.runbook: one entry per verdict kind, the docs table generated from it."""

from __future__ import annotations

import os
import re

import pytest

from runwatch.errors import UsageError
from runwatch.judging.rules import verdict_class
from runwatch.judging.runbook import DONE, RUNBOOK, explain, kinds, markdown_table

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "WATCHDOG.md")


def test_every_kind_the_watchdog_reports_has_an_entry():
    assert [k for k in kinds() if k not in RUNBOOK] == []
    # and the contract's kinds are all there, those of the rules judged on real logs included
    contract = "nonfinite_loss stall stuck_metric inverted_metric loss_at_chance throughput_drop grad_explosion "
    contract += "grad_collapse timeout process_exit oom session_error interrupted invalid_log nonfinite_grad "
    contract += "loss_spike loss_collapse overfitting rank_stall straggler no_progress no_signal metric_stuck"
    assert sorted(contract.split()) == sorted(k for k in RUNBOOK if k != DONE)


@pytest.mark.parametrize("kind", sorted(RUNBOOK))
def test_explain_gives_the_class_the_code_gives(kind):
    doc = explain(kind)
    assert doc["kind"] == kind and doc["meaning"] and doc["action"]
    assert doc["class"] == (None if kind == DONE else verdict_class(kind))


def test_unknown_kind_is_one_line():
    with pytest.raises(UsageError) as exc:
        explain("loss_is_sad")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("explain: unknown kind 'loss_is_sad'; known: ")


def test_the_docs_table_is_the_code():
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"<!-- runbook -->\n(.*?)\n<!-- /runbook -->", text, re.S)
    assert table is not None and table.group(1) == markdown_table()
