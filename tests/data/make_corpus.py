"""Writes the corpus of valid and invalid run directories under tests/data/ (run once, committed).

    python tests/data/make_corpus.py

Each invalid case is the base valid run with one thing broken, and `expected.txt` holds the exact
message the summary must give (after `Invalid training run: `). `args.txt`, when present, holds
extra summarize arguments.
"""

from __future__ import annotations

import copy
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = "r-20261202-ab12cd"
S0 = "s-20261202T140000-1f2e"
S1 = "s-20261202T150000-9a9a"
RECIPE = {"batch_size": 4, "seq_len": 8, "gradient_accumulation_steps": 2, "qk_clip_threshold": 100.0, "max_steps": 40}
TPA = 4 * 8 * 2  # tokens per attempted update


def session(sid, step, tokens, skipped):
    return {
        "session_id": sid,
        "started_at": "2026-12-02T14:00:00Z",
        "start": {"step": step, "tokens": tokens, "skipped": skipped},
        "recipe": dict(RECIPE),
        "optimizers": [{"name": "matrices", "algorithm": "muon"}, {"name": "embeddings", "algorithm": "adamw"}],
        "hardware": {"device": "cpu", "device_count": 0, "world_size": 1},
    }


def base():
    manifest = {
        "schema_version": 1,
        "run_id": RUN,
        "created_at": "2026-12-02T14:00:00Z",
        "sessions": [session(S0, 0, 0, 0), session(S1, 10, 10 * TPA, 0)],
    }
    t = 1796220000.0
    recs = []

    def rec(sid, event, step, session_tokens, **fields):
        nonlocal t
        t += 1.0
        r = {"run_id": RUN, "session_id": sid, "event": event, "step": step, "time": t}
        r.update(fields)
        r["session"] = {
            "elapsed_seconds": t - 1796220000.0,
            "tokens": session_tokens,
            "tokens_per_second": session_tokens / (t - 1796220000.0),
            "profiling_seconds": 0.0,
        }
        r["memory"] = {"host_rss_peak_bytes": 1000 + len(recs)}
        recs.append(r)
        return r

    def train(sid, step, updates, skipped, session_tokens, loss, gmax=2.0, clipped=0.5, qk=None):
        fields = dict(
            updates=updates,
            skipped=skipped,
            attempted=updates + skipped,
            tokens=TPA * (updates + skipped),
            train_seconds=0.5,
            loss=loss,
            lr=0.001,
            grad_norm={"mean": gmax / 2, "max": gmax},
            nonfinite_grad_norms=skipped,
            grad_clipped_fraction=clipped,
        )
        if qk is not None:
            fields["qk_clip"] = {
                "threshold": 100.0,
                "observed_head_updates": qk[0],
                "clipped_head_updates": qk[1],
                "max_logit": qk[2],
            }
        return rec(sid, "train", step, session_tokens, **fields)

    # session 0: crashed after two windows (no session_end)
    train(S0, 5, 5, 0, 5 * TPA, 0.9)
    train(S0, 10, 5, 0, 10 * TPA, 0.8)
    train(S0, 15, 5, 0, 15 * TPA, 0.7)
    # session 1: resumed from step 10
    train(S1, 13, 3, 2, 5 * TPA, 0.69, gmax=3.0, clipped=1 / 3, qk=(24, 3, 120.5))
    rec(S1, "val", 13, 5 * TPA, loss=0.7, metrics={"auroc": 0.6})
    train(S1, 23, 10, 0, 15 * TPA, 0.5, gmax=1.5, clipped=0.0, qk=(80, 0, 90.0))
    rec(S1, "checkpoint", 23, 15 * TPA, path="ckpt/step-23.pt", seconds=0.25, bytes=1234, verified=True)
    train(S1, 31, 8, 0, 23 * TPA, 0.4, gmax=1.0, clipped=0.25)
    rec(S1, "val", 31, 23 * TPA, loss=0.45, metrics={"auroc": 0.93, "accuracy": 0.88})
    rec(S1, "session_end", 31, 23 * TPA, reason="normal", error=None, totals={"tokens": 33 * TPA, "skipped": 2})
    return manifest, recs


def write(name, manifest, recs, kind, expected=None, args=None, raw=None):
    d = os.path.join(HERE, kind, name)
    os.makedirs(d)
    if manifest is not None:
        with open(os.path.join(d, "run.json"), "w") as f:
            f.write(manifest if isinstance(manifest, str) else json.dumps(manifest, indent=1) + "\n")
    with open(os.path.join(d, "metrics.jsonl"), "wb") as f:
        if raw is not None:
            f.write(raw)
        else:
            for r in recs:
                f.write((json.dumps(r, separators=(",", ":")) + "\n").encode())
    if expected is not None:
        with open(os.path.join(d, "expected.txt"), "w") as f:
            f.write(expected + "\n")
    if args:
        with open(os.path.join(d, "args.txt"), "w") as f:
            f.write(" ".join(args) + "\n")


def lines(recs):
    return b"".join((json.dumps(r, separators=(",", ":")) + "\n").encode() for r in recs)


def main():
    for kind in ("valid", "invalid"):
        shutil.rmtree(os.path.join(HERE, kind), ignore_errors=True)
    m, r = base()
    write("two_sessions", m, r, "valid")
    # a session still running (no session_end yet), single session
    m2 = copy.deepcopy(m)
    m2["sessions"] = m2["sessions"][:1]
    write("running", m2, [x for x in r if x["session_id"] == S0], "valid")
    # skipped-only tail handling is the producer's business; here: no qk_clip, no memory
    m3 = copy.deepcopy(m)
    m3["sessions"][-1]["recipe"]["qk_clip_threshold"] = None
    r3 = copy.deepcopy(r)
    for x in r3:
        x.pop("qk_clip", None)
        x.pop("memory", None)
    write("no_qk_no_memory", m3, r3, "valid")

    inv = []

    def case(name, expected, mutate=None, manifest_mutate=None, args=None, raw=None, manifest_raw=None):
        mm, rr = base()
        if manifest_mutate:
            manifest_mutate(mm)
        if mutate:
            mutate(rr)
        inv.append(name)
        write(
            name,
            manifest_raw if manifest_raw is not None else mm,
            rr,
            "invalid",
            expected,
            args,
            raw(rr) if raw else None,
        )

    def at(i, **fields):
        def mutate(rr):
            rr[i].update(fields)

        return mutate

    case(
        "schema_version_2",
        "run.json: schema_version must be 1, got 2",
        manifest_mutate=lambda m: m.update(schema_version=2),
    )
    case(
        "schema_version_bool",
        "run.json: schema_version must be 1, got true",
        manifest_mutate=lambda m: m.update(schema_version=True),
    )
    case(
        "sessions_empty",
        "run.json: sessions must be a non-empty list, got []",
        manifest_mutate=lambda m: m.update(sessions=[]),
    )
    case(
        "sessions_object",
        "run.json: sessions must be a non-empty list, got {}",
        manifest_mutate=lambda m: m.update(sessions={}),
    )
    case(
        "manifest_malformed",
        "run.json: malformed JSON: Expecting ':' delimiter at column 19",
        manifest_raw='{"schema_version" 1}\n',
    )
    case(
        "recipe_batch_zero",
        "run.json: sessions[1].recipe.batch_size must be an int >= 1, got 0",
        manifest_mutate=lambda m: m["sessions"][1]["recipe"].update(batch_size=0),
    )
    case(
        "duplicate_session_id",
        "run.json: sessions[1].session_id 's-20261202T140000-1f2e' is not unique",
        manifest_mutate=lambda m: m["sessions"][1].update(session_id=S0),
    )
    case("torn_tail", "Uncommitted metrics tail at line 10", raw=lambda rr: lines(rr)[:-1])
    case(
        "malformed_line",
        "metrics.jsonl:5: malformed JSON: Expecting property name enclosed in double quotes at column 2",
        raw=lambda rr: lines(rr[:4]) + b"{oops\n" + lines(rr[4:]),
    )
    case(
        "nan_token",
        "metrics.jsonl:4: malformed JSON: NaN is not a valid JSON number",
        raw=lambda rr: lines(rr[:3]) + lines(rr[3:4]).replace(b'"loss":0.69', b'"loss":NaN') + lines(rr[4:]),
    )
    case(
        "huge_float",
        "metrics.jsonl:4: loss must be a finite number, got Infinity",
        raw=lambda rr: lines(rr[:3]) + lines(rr[3:4]).replace(b'"loss":0.69', b'"loss":1e999') + lines(rr[4:]),
    )
    case(
        "huge_int",
        "metrics.jsonl:4: malformed JSON: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit",
        raw=lambda rr: lines(rr[:3]) + lines(rr[3:4]).replace(b'"step":13', b'"step":' + b"9" * 5000) + lines(rr[4:]),
    )
    case(
        "invalid_utf8",
        "metrics.jsonl:4: invalid UTF-8 at byte 2",
        raw=lambda rr: lines(rr[:3]) + b'{"\xff\xfe":1}\n' + lines(rr[4:]),
    )
    case(
        "array_record",
        "metrics.jsonl:2: a record must be a JSON object, got list",
        raw=lambda rr: lines(rr[:1]) + b"[1, 2]\n" + lines(rr[2:]),
    )
    case(
        "run_id_mismatch",
        "metrics.jsonl:6: run_id 'r-other' differs from the manifest's 'r-20261202-ab12cd'",
        at(5, run_id="r-other"),
    )
    case("step_gap", "metrics.jsonl:6: step 24 after 13 with 10 updates (expected 23)", at(5, step=24))
    case("first_step_wrong", "metrics.jsonl:4: step 15 after 10 with 3 updates (expected 13)", at(3, step=15))
    case("attempted_mismatch", "metrics.jsonl:4: attempted 4 != updates 3 + skipped 2", at(3, attempted=4))
    case(
        "token_identity",
        "metrics.jsonl:6: tokens 639 != batch_size 4 * seq_len 8 * gradient_accumulation_steps 2 * attempted 10 (expected 640)",
        at(5, tokens=639),
    )
    case(
        "qk_threshold",
        "metrics.jsonl:4: qk_clip.threshold 50.0 differs from the recipe's qk_clip_threshold 100.0",
        lambda rr: rr[3]["qk_clip"].update(threshold=50.0),
    )
    case(
        "qk_clipped_gt_observed",
        "metrics.jsonl:4: qk_clip.clipped_head_updates 30 > observed_head_updates 24",
        lambda rr: rr[3]["qk_clip"].update(clipped_head_updates=30),
    )
    case(
        "qk_without_threshold",
        "metrics.jsonl:4: qk_clip.threshold 100.0 differs from the recipe's qk_clip_threshold null",
        manifest_mutate=lambda m: m["sessions"][1]["recipe"].update(qk_clip_threshold=None),
    )
    case(
        "clipped_fraction_high",
        "metrics.jsonl:6: grad_clipped_fraction must be a number in [0, 1], got 1.5",
        at(5, grad_clipped_fraction=1.5),
    )
    case(
        "train_seconds_zero",
        "metrics.jsonl:6: train_seconds must be a finite number > 0, got 0",
        at(5, train_seconds=0),
    )
    case("updates_zero", "metrics.jsonl:6: updates must be an int >= 1, got 0", at(5, updates=0))
    case("loss_bool", "metrics.jsonl:6: loss must be a finite number, got true", at(5, loss=True))
    case("lr_negative", "metrics.jsonl:6: lr must be a finite number >= 0, got -0.1", at(5, lr=-0.1))
    case("grad_norm_array", "metrics.jsonl:6: grad_norm must be an object, got [1, 2]", at(5, grad_norm=[1, 2]))
    case("step_float", "metrics.jsonl:6: step must be an int >= 0, got 23.0", at(5, step=23.0))
    case(
        "unknown_event",
        "metrics.jsonl:5: event must be one of train, val, checkpoint, session_end, got 'eval'",
        at(4, event="eval"),
    )
    case("val_step", "metrics.jsonl:5: val step 12 is not the current step 13", at(4, step=12))
    case(
        "val_metric_string",
        "metrics.jsonl:5: metrics.auroc must be a finite number, got '0.6'",
        lambda rr: rr[4]["metrics"].update(auroc="0.6"),
    )
    case("checkpoint_verified_string", "metrics.jsonl:7: verified must be a bool, got 'yes'", at(6, verified="yes"))
    case(
        "memory_negative",
        "metrics.jsonl:6: memory.host_rss_peak_bytes must be an int >= 0, got -1",
        lambda rr: rr[5]["memory"].update(host_rss_peak_bytes=-1),
    )
    case("missing_session", "metrics.jsonl:6: missing session", lambda rr: rr[5].pop("session"))
    case(
        "missing_session_id",
        "metrics.jsonl:6: session_id must be a string, got null",
        lambda rr: rr[5].pop("session_id"),
    )
    case("record_after_end", "metrics.jsonl:11: record after session_end", lambda rr: rr.append(copy.deepcopy(rr[-2])))
    case(
        "end_reason",
        "metrics.jsonl:10: reason must be one of normal, nonfinite_loss, error, interrupted, got 'done'",
        at(9, reason="done"),
    )
    case(
        "totals_tokens",
        "session_end: totals.tokens 2111 - start.tokens 640 != sum of tokens 1472",
        lambda rr: rr[9]["totals"].update(tokens=2111),
    )
    case(
        "totals_skipped",
        "session_end: totals.skipped 3 - start.skipped 0 != sum of skipped 2",
        lambda rr: rr[9]["totals"].update(skipped=3),
    )
    case("end_step", "metrics.jsonl:10: session_end step 32 is not the current step 31", at(9, step=32))
    case(
        "no_train_window",
        "session s-20261202T150000-9a9a: no train window",
        lambda rr: rr.__setitem__(slice(3, None), []),
    )
    case("expect_step_wrong", "expected the session to end at step 40, it ended at 31", args=["--expect-step", "40"])
    case(
        "expect_step_not_completed",
        "expected a completed session at step 31; the session ended 'error'",
        at(9, reason="error", error="boom"),
        args=["--expect-step", "31"],
    )
    case("after_step_negative", "after_step must be an int >= 0, got -1", args=["--after-step", "-1"])
    case("after_step_text", "after_step must be an int >= 0, got 'ten'", args=["--after-step", "ten"])
    case(
        "deep_nesting",
        "metrics.jsonl:2: JSON nested too deeply",
        raw=lambda rr: lines(rr[:1]) + b"[" * 100000 + b"]" * 100000 + b"\n" + lines(rr[1:]),
    )
    print(f"wrote {len(inv)} invalid and 3 valid cases")


if __name__ == "__main__":
    main()
