"""supervise's relaunch policy as a table: (journal, verdict, options, the log's checkpoints) →
decision, without a process, a file or a clock."""

from __future__ import annotations

import pytest

from runwatch.files.rundir import ENV_RESUME_FROM, ENV_ROLLBACK, ENV_SKIP_STEPS
from runwatch.judging.rules import Finding
from runwatch.judging.verdict import Verdict
from runwatch.reading.parsing import Record, Session
from runwatch.supervising.policy import MAX_BACKOFF_SECONDS, Attempt, decide, progress, rollback_facts, stopped
from runwatch.supervising.supervision import Counters, SuperviseOptions


def journal(**counters):
    """A journal whose last record (a verdict's) carries these counters, as supervise writes it."""
    launch = {"event": "launch", "attempt": 1, "pid": 100, **Counters(attempt=1).to_json()}
    last = {"event": "verdict", "pid": 100, **Counters(**{"attempt": 1, **counters}).to_json()}
    return [launch, last]


def anomaly(kind, step=40, onset=None, message="trouble"):
    return Verdict.of(Finding(kind, step, message, onset=onset), 0.0)


def log(*events):
    """One session of a log: ("train", step) and ("ckpt", step) records; checkpoints on a remote
    store (never looked for on this disk)."""
    recs = []
    for what, step in events:
        if what == "train":
            recs.append(Record("train", "s", step, f"l{step}", None, 2.0))
        else:
            recs.append(Record("checkpoint", "s", step, f"l{step}", None, raw={"step": step, "path": f"s3://b/{step}"}))
    return [Session("s", 0, recs)]


EVERY_TEN = log(("train", 10), ("ckpt", 10), ("train", 20), ("ckpt", 20), ("train", 30), ("ckpt", 30), ("train", 40))
OPTS = SuperviseOptions()  # 5 restarts, 2 rollbacks, back-off 10 s
RELAUNCH = "runwatch supervise: stall (transient); relaunching in {} s"


@pytest.mark.parametrize(
    "records, verdict, opts, attempt, expected",
    [
        # a transient relaunch: the back-off doubles with each relaunch in a row without a checkpoint...
        (journal(), anomaly("stall"), OPTS, Attempt(9), ("relaunch", "relaunch", None, 10.0, RELAUNCH.format(10))),
        (
            journal(streak=2),
            anomaly("stall"),
            OPTS,
            Attempt(9),
            ("relaunch", "relaunch", None, 40.0, RELAUNCH.format(40)),
        ),
        # ... up to ten minutes
        (
            journal(streak=9),
            anomaly("stall"),
            OPTS,
            Attempt(9),
            ("relaunch", "relaunch", None, MAX_BACKOFF_SECONDS, RELAUNCH.format(600)),
        ),
        # ... and starts again once the attempt saved a checkpoint
        (
            journal(streak=3, checkpoints_at_launch=2),
            anomaly("stall"),
            OPTS,
            Attempt(9, checkpoints=3),
            ("relaunch", "relaunch", None, 10.0, RELAUNCH.format(10)),
        ),
        (
            journal(streak=3),
            anomaly("stall"),
            SuperviseOptions(backoff=0),
            Attempt(9),
            ("relaunch", "relaunch", None, 0.0, RELAUNCH.format(0)),
        ),
        # the restart budget spent: gave up, gave_up's code
        (
            journal(restarts=5),
            anomaly("process_exit", message="the process exited with status 1"),
            OPTS,
            Attempt(9),
            (
                "give_up",
                "gave_up",
                7,
                0.0,
                "ANOMALY process_exit step=40: the process exited with status 1 (gave up after 5 restarts)",
            ),
        ),
        # ... on attempts that made no progress: said so
        (
            journal(restarts=2, stuck=3),
            anomaly("stall"),
            SuperviseOptions(restarts=2),
            Attempt(9),
            (
                "give_up",
                "gave_up",
                7,
                0.0,
                "ANOMALY stall step=40: trouble (gave up after 2 restarts: 3 attempts in a row made no progress)",
            ),
        ),
        # the first launch ended before its first record: not relaunched (a usage error)
        (
            journal(),
            anomaly("process_exit", 0, message="exit 1"),
            OPTS,
            Attempt(0),
            (
                "refuse",
                "gave_up",
                2,
                0.0,
                "ANOMALY process_exit step=0: exit 1 (not relaunched: it ended before its first record)",
            ),
        ),
        # ... unless it was adopted, or it is not the first attempt
        (
            journal(),
            anomaly("process_exit", 0),
            OPTS,
            Attempt(0, adopted=True),
            ("relaunch", "relaunch", None, 10.0, None),
        ),
        (
            journal(attempt=2, restarts=1),
            anomaly("process_exit", 0),
            OPTS,
            Attempt(0),
            ("relaunch", "relaunch", None, 10.0, None),
        ),
        # a divergence rolls back to the latest checkpoint before the window that holds the onset
        (
            journal(),
            anomaly("loss_spike", 40, 30),
            OPTS,
            rollback_facts(Attempt(9), EVERY_TEN, anomaly("loss_spike", 40, 30), None),
            (
                "rollback",
                "rollback",
                None,
                0.0,
                "runwatch supervise: loss_spike (divergence) from step 21; rolling back to s3://b/20 (step 20)",
            ),
        ),
        # ... a log that names no checkpoint: nothing to roll back to, fatal
        (
            journal(),
            anomaly("loss_spike", 40, 30, "loss 9.1"),
            OPTS,
            rollback_facts(Attempt(9), log(("train", 10), ("train", 40)), anomaly("loss_spike", 40, 30), None),
            (
                "give_up",
                "gave_up",
                7,
                0.0,
                "ANOMALY loss_spike step=40: loss 9.1 (the log names no checkpoints to roll back to)",
            ),
        ),
        # ... none before the onset
        (
            journal(),
            anomaly("nonfinite_loss", 40, 5, "loss nan"),
            OPTS,
            rollback_facts(Attempt(9), EVERY_TEN, anomaly("nonfinite_loss", 40, 5), None),
            (
                "give_up",
                "gave_up",
                7,
                0.0,
                "ANOMALY nonfinite_loss step=40: loss nan (no checkpoint before step 5 to roll back to)",
            ),
        ),
        # the rollback budget spent: gave up whatever the log holds
        (
            journal(rollbacks=2),
            anomaly("loss_spike", 40, 30, "loss 9.1"),
            OPTS,
            rollback_facts(Attempt(9), EVERY_TEN, anomaly("loss_spike", 40, 30), None),
            ("give_up", "gave_up", 7, 0.0, "ANOMALY loss_spike step=40: loss 9.1 (gave up after 2 rollbacks)"),
        ),
        # fatal: stop, the fatal code
        (
            journal(),
            anomaly("invalid_log", 3, message="bad"),
            OPTS,
            Attempt(9),
            ("give_up", "gave_up", 7, 0.0, "ANOMALY invalid_log step=3: bad"),
        ),
        # done: exit 0
        (
            journal(),
            Verdict.done(50, "session ended normally", 0.0),
            OPTS,
            Attempt(9),
            ("done", "done", 0, 0.0, "OK done step=50"),
        ),
        # an empty journal: a supervision's first counters
        ([], anomaly("stall"), OPTS, Attempt(9), ("relaunch", "relaunch", None, 10.0, RELAUNCH.format(10))),
    ],
)
def test_decide(records, verdict, opts, attempt, expected):
    d = decide(records, verdict, opts, attempt)
    got = (d.action, d.event, d.code, d.delay, d.line)
    assert got == expected if expected[-1] is not None else got[:-1] == expected[:-1]


def test_a_relaunch_counts_a_restart_and_the_streak_and_keeps_a_rollback_not_yet_checkpointed_past():
    env = {ENV_RESUME_FROM: "s3://b/20", ENV_ROLLBACK: "1", ENV_SKIP_STEPS: "21-40"}
    d = decide(
        journal(restarts=1, streak=1, env=env, checkpoints_at_launch=2),
        anomaly("stall"),
        OPTS,
        Attempt(9, checkpoints=2),
    )
    assert (d.counters.restarts, d.counters.streak, dict(d.env), dict(d.fields)) == (
        2,
        2,
        env,
        {"backoff_seconds": 20.0},
    )
    # once the attempt saved a checkpoint, the next resumes from its latest one: no rollback variables
    d = decide(
        journal(restarts=1, streak=1, env=env, checkpoints_at_launch=2),
        anomaly("stall"),
        OPTS,
        Attempt(9, checkpoints=3),
    )
    assert (d.counters.restarts, d.counters.streak, dict(d.env), d.delay) == (2, 1, {}, 10.0)


def test_a_rollback_counts_one_and_names_its_checkpoint_and_the_steps_to_skip():
    v = anomaly("loss_spike", 40, 30)
    d = decide(journal(rollbacks=1), v, OPTS, rollback_facts(Attempt(9), EVERY_TEN, v, None))
    assert d.counters.rollbacks == 2 and d.counters.restarts == 0
    assert dict(d.env) == {ENV_RESUME_FROM: "s3://b/20", ENV_ROLLBACK: "2", ENV_SKIP_STEPS: "21-40"}
    assert dict(d.fields) == {"checkpoint": "s3://b/20", "checkpoint_step": 20, "skip_steps": "21-40"}


def test_budgets_and_codes_follow_the_options():
    spent = decide(journal(restarts=1), anomaly("stall"), SuperviseOptions(restarts=1), Attempt(9), {"gave_up": 9})
    assert (spent.action, spent.code, dict(spent.fields)) == ("give_up", 9, {})
    assert decide(journal(restarts=1), anomaly("stall"), SuperviseOptions(restarts=2), Attempt(9)).action == "relaunch"
    assert decide(journal(), anomaly("loss_spike", 40, 30), SuperviseOptions(rollbacks=0), Attempt(9)).code == 7
    # a divergence with nothing to roll back to has the fatal code, not gave_up's
    none = decide(journal(), anomaly("loss_spike", 40, 30), OPTS, Attempt(9), {"gave_up": 9, "fatal": 8})
    assert none.code == 8


@pytest.mark.parametrize(
    "signal_name, event, code", [("SIGTERM", "preempted", 75), ("SIGUSR1", "preempted", 75), ("SIGINT", "gave_up", 130)]
)
def test_a_signal_to_the_supervisor_ends_the_allocation(signal_name, event, code):
    v = anomaly("interrupted", 40, message=f"preempted by {signal_name}")
    d = stopped(journal(restarts=3), v, signal_name)
    assert (d.action == "preempted", d.event, d.code, d.line, d.counters.restarts) == (
        event == "preempted",
        event,
        code,
        v.line(),
        3,
    )
    assert stopped([], v, "SIGTERM", {"preempted": 0}).code == 0


@pytest.mark.parametrize(
    "high_step, stuck, last_step, expected",
    [(20, 1, 30, (0, 30)), (20, 1, 20, (2, 20)), (20, 0, None, (1, 20))],
)
def test_progress_counts_attempts_without_a_new_step(high_step, stuck, last_step, expected):
    c = progress(Counters(high_step=high_step, stuck=stuck), last_step)
    assert (c.stuck, c.high_step) == expected


def test_the_counters_read_back_from_the_journal_are_those_written():
    c = Counters(
        attempt=3, restarts=1, streak=1, high_step=40, first_launch=1700000000.5, stale_sessions=frozenset("ab")
    )
    d = decide([c.to_json()], anomaly("stall"), OPTS, Attempt(9))
    assert d.counters == Counters(**{**vars(c), "restarts": 2, "streak": 2})
    assert type(d.counters.high_step) is int  # a journal record says 40, as before the relaunch
