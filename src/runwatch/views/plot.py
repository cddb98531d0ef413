"""`runwatch plot`: one small PNG of a run that a person can read on a phone.

    runwatch plot runs/a                 # writes runs/a/snapshot.png, prints its path
    info = snapshot("runs/a", "a.png")   # {"path", "panels", "sessions", "findings", "verdict", "size"}

The latest session is drawn in full colour, earlier sessions in a light shade of the same colour.
Panels (each only when the log has its data): loss (train and eval), learning rate, gradient norm
(log scale, with the watchdog's `--grad-max`/`--grad-min`), throughput (with the session's
baseline and the `throughput_drop` threshold), eval metrics (the `--metric` with its chance line
and `--metric-min`). A red marker names every anomaly the watchdog's rules find when replayed over
the log, and the header repeats the verdict of `watchdog.json` when there is one.

The run is read through `records` (the one parser) and judged by `rules` (the watchdog's own
rules) in `plotdata.load_run` (re-exported here), the only function that touches either; this
module draws what it returns. matplotlib is imported only when a picture is drawn
(`pip install 'runwatch[plot]'`), and only its object API with the Agg canvas is used: no pyplot,
no global backend switch.

This module lays the picture out (its size, the header, the shared step axis, the marks of
findings) and writes it; each panel is drawn by `plotpanels`, the reading is in `plotdata`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import textwrap
from typing import TYPE_CHECKING, Any, TypedDict

from ..errors import InvalidRunError, RunwatchError, UsageError
from ..files import atomic_write
from ..judging import RECOVERED, RuleOptions, finding_line, fmt_step
from ..options import add_flags, build, given_options
from ..reading import ReadOptions, read_options, recorded_rule_options, resolve_target
from ..reading.readers import add_arguments as add_read_arguments
from .plotdata import PlotView as PlotView
from .plotdata import SessionSeries as SessionSeries
from .plotdata import load_run as load_run
from .plotpanels import COLOURS, PANEL_DRAWERS

if TYPE_CHECKING:  # matplotlib loads only when a picture is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


# Pixel geometry. 800 px wide is a phone screen's width at 2x; at 100 dpi, 10 pt text is ~14 px,
# which stays legible when the picture is shown at its own size.
WIDTH_PX = 800
DPI = 100
HEADER_PX = 108  # the title line and up to HEADER_FINDING_LINES verdict/finding lines
PANEL_PX = 176  # one panel including the gap above it for its title
FOOTER_PX = 44  # the step axis' labels
HEADER_FINDING_LINES = 4
MARGIN_LEFT_PX = 74
MARGIN_RIGHT_PX = 16

MAX_MARKER_LINES = 12  # findings drawn as full-height lines; later ones are ticks
MAX_LABELS = 3  # finding labels a panel
_LABEL_CHAR_PX = 7.0  # 8 pt bold DejaVu Sans with digits and underscores, measured on the PNG

PANELS = ("loss", "lr", "grad_norm", "throughput", "eval_metrics")

# Which panel a finding's marker belongs to; kinds not listed go to the first panel.
_PANEL_OF_KIND = {
    "nonfinite_grad": "grad_norm",
    "grad_explosion": "grad_norm",
    "grad_collapse": "grad_norm",
    "throughput_drop": "throughput",
    "inverted_metric": "eval_metrics",
    "stuck_metric": "eval_metrics",
}

_EARLIER_ALPHA = 0.3  # earlier sessions: the same colour, lighter
# --- drawing --------------------------------------------------------------------------------------


def figure_size(panels: int) -> tuple[int, int]:
    """The PNG's (width, height) in pixels for this many panels."""
    return WIDTH_PX, HEADER_PX + PANEL_PX * panels + FOOTER_PX


def _panels(view: PlotView) -> list[str]:
    def any_finite(attr: str) -> bool:
        return any(math.isfinite(v) for s in view.sessions for v in getattr(s, attr))

    out = []
    if any_finite("loss") or any_finite("eval_loss"):
        out.append("loss")
    if any_finite("lr"):
        out.append("lr")
    if any_finite("grad_mean"):
        out.append("grad_norm")
    if any_finite("throughput"):
        out.append("throughput")
    if any(s.metrics for s in view.sessions):
        out.append("eval_metrics")
    return out


def _header(view: PlotView) -> tuple[str, list[tuple[str, str]]]:
    latest = view.sessions[-1]
    n = len(view.sessions)
    parts = [f"session {n}/{n}" if n > 1 else "1 session"]
    if latest.start_step:
        parts[0] += f" from step {fmt_step(latest.start_step)}"
    parts.append(f"step {fmt_step(latest.last_step)}")
    if latest.end_reason:
        parts.append(f"ended {latest.end_reason}")
    tail = " · ".join(parts)
    name = view.title if len(view.title) + len(tail) <= 80 else "…" + view.title[-(79 - len(tail)) :]
    title = f"{name} · {tail}"
    lines: list[tuple[str, str]] = []  # (text, colour)
    if view.verdict is not None:
        v = view.verdict
        if v["verdict"] == "done":
            text = f"watchdog: OK done step={_fmt(v.get('step'))}"
        else:
            text = f"watchdog: ANOMALY {v.get('kind')} step={_fmt(v.get('step'))}: {v.get('message')}"
        lines.append((text, COLOURS["ok"] if v["verdict"] == "done" else COLOURS["alert"]))
    elif view.verdict_problem:
        lines.append((view.verdict_problem, COLOURS["guide"]))
    if view.findings:
        for f in view.findings:
            where = "" if f.session == latest.key else " (earlier session)"
            if f.severity == RECOVERED:  # a fault a later session went on from: not the run's trouble
                lines.append((f"check: {finding_line(f)}", COLOURS["guide"]))
            else:
                lines.append((f"check: {f.line('FINDING')}{where}", COLOURS["alert"]))
    else:
        lines.append((f"check: OK clean step={fmt_step(latest.last_step)}", COLOURS["ok"]))
    if n > 1:
        lines.append(("earlier sessions in a lighter shade", COLOURS["guide"]))
    wrapped: list[tuple[str, str]] = []
    for i, (text, colour) in enumerate(lines):
        more = textwrap.wrap(text, 104, subsequent_indent="    ", max_lines=2, placeholder=" ...")
        if len(wrapped) + len(more) > HEADER_FINDING_LINES - (i < len(lines) - 1):
            left = sum(1 for _, c in lines[i:] if c == COLOURS["alert"])
            wrapped.append((f"... and {left} more (runwatch check lists every finding)", COLOURS["guide"]))
            break
        wrapped.extend((w, colour) for w in more)
    return title, wrapped


def _fmt(v: Any) -> str:
    return fmt_step(v) if type(v) in (int, float) else str(v)


def _draw(view: PlotView, panels: list[str], opts: RuleOptions) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter, FuncFormatter, MaxNLocator

    width, height = figure_size(len(panels))
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    axes: list[Axes] = list(fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0])
    axes_px = PANEL_PX * len(panels)
    gap_px = 30
    fig.subplots_adjust(
        left=MARGIN_LEFT_PX / width,
        right=1 - MARGIN_RIGHT_PX / width,
        top=1 - HEADER_PX / height,
        bottom=FOOTER_PX / height,
        hspace=gap_px / ((axes_px - gap_px * len(panels)) / len(panels)),
    )
    title, lines = _header(view)
    fig.text(8 / width, 1 - 8 / height, title, fontsize=11, fontweight="bold", va="top")
    for i, (text, colour) in enumerate(lines):
        fig.text(8 / width, 1 - (30 + 14 * i) / height, text, fontsize=8.5, color=colour, va="top")

    latest = view.sessions[-1]
    earlier = view.sessions[:-1]
    by_name = dict(zip(panels, axes))
    for name, ax in by_name.items():
        ax.grid(True, color="#dddddd", linewidth=0.6)
        ax.tick_params(labelsize=8.5)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        draw = PANEL_DRAWERS[name]
        for s in earlier:
            draw(ax, s, view, opts, alpha=_EARLIER_ALPHA, latest=False)
        draw(ax, latest, view, opts, alpha=1.0, latest=True)
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            # in the title row, right of the title: never on top of the data
            ax.legend(
                handles,
                labels,
                fontsize=7.5,
                loc="lower right",
                bbox_to_anchor=(1.0, 0.99),
                frameon=False,
                ncol=len(handles),
                handlelength=1.6,
                borderaxespad=0.0,
                columnspacing=1.0,
                handletextpad=0.4,
            )
    if latest.start_step and earlier:
        for ax in axes:
            ax.axvline(latest.start_step, color=COLOURS["guide"], linestyle=":", linewidth=1)
        axes[0].annotate(
            f"resume {fmt_step(latest.start_step)}",
            (latest.start_step, 0),
            xycoords=("data", "axes fraction"),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=7.5,
            color=COLOURS["guide"],
        )
    lo, hi = _x_range(view)
    axes[0].set_xlim(lo - (hi - lo) * 0.02, hi + (hi - lo) * 0.02)
    _mark_findings(view, by_name, axes)
    if "throughput" in by_name:
        by_name["throughput"].yaxis.set_major_formatter(EngFormatter(sep=""))
    axes[-1].xaxis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 5, 10], integer=True))  # steps are whole
    axes[-1].xaxis.set_major_formatter(FuncFormatter(_step_label))
    axes[-1].set_xlabel("step", fontsize=9)
    return fig


def _step_label(v: float, _pos: Any = None) -> str:
    """200, 5k, 1.5M: steps without an offset label in the corner."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div and abs(v) >= 10_000:
            return f"{v / div:.4g}{suffix}"
    return f"{v:.4g}"


def _x_range(view: PlotView) -> tuple[float, float]:
    steps = [st for s in view.sessions for st in s.train_step + s.eval_step]
    lo, hi = min(steps), max(steps)
    if view.sessions[-1].start_step is not None:
        lo = min(lo, view.sessions[-1].start_step)
    return (lo, hi) if hi > lo else (lo - 1, hi + 1)


def _mark_findings(view: PlotView, by_name: dict[str, Axes], axes: list[Axes]) -> None:
    latest = view.sessions[-1].key
    marks = [(f.step, f.kind, f.session == latest) for f in view.findings]
    v = view.verdict
    if (
        v is not None
        and v.get("verdict") == "anomaly"
        and type(v.get("step")) in (int, float)
        and not any(step == v["step"] and kind == v.get("kind") for step, kind, _ in marks)
    ):
        marks.append((v["step"], str(v.get("kind")), True))
    lines, ticks = marks[:MAX_MARKER_LINES], marks[MAX_MARKER_LINES:]
    for current in (False, True):
        steps = [step for step, _, c in lines if c is current]
        if steps:  # one collection a panel
            for ax in axes:
                ax.vlines(
                    steps,
                    0,
                    1,
                    transform=ax.get_xaxis_transform(),
                    colors=COLOURS["alert"],
                    linewidth=1.2 if current else 0.8,
                    alpha=0.63 if current else 0.25,
                )
    # beyond the first few, a finding is a short tick along the top of its panel: a replay can find
    # thousands, and full-height lines would hide the data
    for ax in by_name.values():
        steps = [step for step, kind, _ in ticks if by_name.get(_PANEL_OF_KIND.get(kind, ""), axes[0]) is ax]
        if steps:
            ax.vlines(steps, 0.94, 1, transform=ax.get_xaxis_transform(), colors=COLOURS["alert"], linewidth=0.8)
    lo, hi = axes[0].get_xlim()
    axis_px = WIDTH_PX - MARGIN_LEFT_PX - MARGIN_RIGHT_PX
    labelled: dict[Axes, list[tuple[float, float]]] = {}
    for step, kind, current in marks:
        ax = by_name.get(_PANEL_OF_KIND.get(kind, ""), axes[0])
        text = f"{kind} @ {fmt_step(step)}"
        width = (len(text) * _LABEL_CHAR_PX + 8) / axis_px * (hi - lo)  # the label's width in steps
        right_half = step > lo + (hi - lo) * 0.6
        span = (step - width, step) if right_half else (step, step + width)
        taken = labelled.setdefault(ax, [])
        if len(taken) >= MAX_LABELS or any(a < span[1] and span[0] < b for a, b in taken):
            continue  # labels never print over each other
        taken.append(span)
        alpha = 0.9 if current else 0.35
        ax.annotate(
            text,
            (step, 1),
            xycoords=("data", "axes fraction"),
            xytext=(-4 if right_half else 4, -4),
            textcoords="offset points",
            ha="right" if right_half else "left",
            va="top",
            fontsize=8,
            color=COLOURS["alert"],
            alpha=alpha,
            fontweight="bold" if current else "normal",
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
        )


# --- the snapshot ---------------------------------------------------------------------------------


class Snapshot(TypedDict):
    """What `snapshot` drew (`runwatch plot --json`)."""

    path: str
    panels: list[str]  # of PANELS, top to bottom
    sessions: int
    findings: list[dict[str, Any]]  # Finding.to_json() of each
    verdict: dict[str, Any] | None  # watchdog.json
    size: list[int]  # [width, height] in pixels


def snapshot(
    target: str, output: str | None = None, opts: RuleOptions | None = None, read: ReadOptions | None = None
) -> Snapshot:
    """Draw `target` (a run dir, a JSONL log or a trainer_state.json) into a PNG, atomically.

    Returns {"path", "panels", "sessions", "findings", "verdict", "size"}. Default: RUN_DIR/snapshot.png.
    """
    opts = opts or RuleOptions()
    target = os.fspath(target)
    if not os.path.exists(target):
        raise UsageError(f"plot: {target}: no such run directory or log")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RunwatchError("plot needs matplotlib: pip install 'runwatch[plot]'") from None
    view = load_run(target, opts, read)
    if not any(s.points() for s in view.sessions):
        raise InvalidRunError(f"{view.target.log_path}: no train or eval records to plot")
    if not view.sessions[-1].points():  # the latest session has only a checkpoint/end so far
        view.sessions = [s for s in view.sessions if s.points()]
    panels = _panels(view)
    if not panels:
        raise InvalidRunError(f"{view.target.log_path}: no finite loss, gradient norm, throughput or metric to plot")
    path = output or os.path.join(view.target.run_dir, "snapshot.png")
    fig = _draw(view, panels, opts)
    _save(fig, path)
    return {
        "path": path,
        "panels": panels,
        "sessions": len(view.sessions),
        "findings": [f.to_json() for f in view.findings],
        "verdict": view.verdict,
        "size": list(figure_size(len(panels))),
    }


def _save(fig: Figure, path: str) -> None:
    """Write the PNG atomically (journal.atomic_write): never a half-written picture."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"plot: -o {path}: directory {directory} does not exist")
    try:
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format="png", dpi=DPI)
    except OSError as exc:
        raise RunwatchError(f"plot: cannot write {path}: {exc.strerror or exc}") from None


# --- the command line -----------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`runwatch plot TARGET [-o PNG] [--json]` plus the thresholds of `runwatch check`."""
    p.add_argument("target", metavar="RUN_DIR|FILE", help="a run directory, a JSONL log or a trainer_state.json")
    add_flags(p, RuleOptions, "plot")
    add_read_arguments(p)  # --format, --pattern, --run
    p.add_argument("-o", "--output", default=None, metavar="PNG", help="where to write (default RUN_DIR/snapshot.png)")
    p.add_argument("--json", action="store_true", help="print path, panels, sessions and findings as JSON")


def run(args: argparse.Namespace) -> int:
    if not os.path.exists(args.target):
        raise UsageError(f"plot: {args.target}: no such run directory or log")
    read = read_options(args)
    run_dir = resolve_target(args.target, read).run_dir
    recorded = recorded_rule_options(run_dir, RuleOptions, "plot")  # the run's own, under those given
    opts = build(RuleOptions, run_dir, {**recorded, **given_options(args, RuleOptions)}, "plot")
    info = snapshot(args.target, args.output, opts, read)
    if args.json:
        print(json.dumps(info, indent=2, allow_nan=False, ensure_ascii=False))
    else:
        print(info["path"])
    return 0
