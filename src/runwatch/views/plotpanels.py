"""The panels of `runwatch plot`: one drawing function a panel, and the colours they share.

    draw = PANEL_DRAWERS["loss"]             # loss, lr, grad_norm, throughput, eval_metrics
    draw(ax, session, view, opts, alpha=1.0, latest=True)

Each function draws one session's series of `plotdata.PlotView` on its matplotlib Axes: loss
(train and eval, the `--chance-loss` line), learning rate, gradient norm (log scale, with the
watchdog's `--grad-max`/`--grad-min`), throughput (in the unit the log counts it, with the
session's baseline and the `throughput_drop` threshold), eval metrics (the `--metric` with its
chance line and `--metric-min`). `latest`: the session drawn in full colour, which alone gives
the legend its entries; earlier sessions come with a lower `alpha`. The layout is `plot`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..judging import RuleOptions
from .plotdata import PlotView, SessionSeries

if TYPE_CHECKING:  # matplotlib loads only when a picture is drawn
    from matplotlib.axes import Axes


MAX_MARKED_POINTS = 60  # eval series with more points than this are drawn as lines without dots

# Colours: matplotlib's default cycle, so the picture looks like every other matplotlib plot.
COLOURS = {
    "loss": "#1f77b4",
    "eval_loss": "#ff7f0e",
    "lr": "#2ca02c",
    "grad": "#9467bd",
    "throughput": "#17becf",
    "metric": "#d62728",
    "alert": "#d62728",
    "ok": "#2ca02c",
    "guide": "#555555",
}
OTHER_METRIC_COLOURS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#1f77b4")


def _dot(steps: list[int | float]) -> str | None:
    return "o" if len(steps) <= MAX_MARKED_POINTS else None


def _label(latest: bool, text: str) -> str | None:
    return text if latest else None  # earlier sessions share the latest one's legend entries


def _loss(ax: Axes, s: SessionSeries, view: PlotView, opts: RuleOptions, alpha: float, latest: bool) -> None:
    ax.set_title("loss", loc="left", fontsize=10, pad=3)
    ax.plot(s.train_step, s.loss, color=COLOURS["loss"], alpha=alpha, linewidth=1.4, label=_label(latest, "train"))
    if any(math.isfinite(v) for v in s.eval_loss):
        steps = [st for st, v in zip(s.eval_step, s.eval_loss) if math.isfinite(v)]
        values = [v for v in s.eval_loss if math.isfinite(v)]
        ax.plot(
            steps,
            values,
            color=COLOURS["eval_loss"],
            alpha=alpha,
            linewidth=1.2,
            marker=_dot(steps),
            markersize=3.5,
            label=_label(latest, "eval"),
        )
    if opts.chance_loss is not None and latest:
        ax.axhline(
            opts.chance_loss, color=COLOURS["guide"], linestyle=":", linewidth=1, label=f"chance {opts.chance_loss:.3g}"
        )
    finite = [v for ss in view.sessions for v in ss.loss + ss.eval_loss if math.isfinite(v)]
    if latest and finite and min(finite) > 0 and max(finite) / min(finite) > 50:
        ax.set_yscale("log")


def _lr(ax: Axes, s: SessionSeries, view: PlotView, opts: RuleOptions, alpha: float, latest: bool) -> None:
    ax.set_title("learning rate", loc="left", fontsize=10, pad=3)
    ax.plot(s.train_step, s.lr, color=COLOURS["lr"], alpha=alpha, linewidth=1.4)
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    if latest:
        top = max((v for ss in view.sessions for v in ss.lr if math.isfinite(v)), default=1.0)
        ax.set_ylim(0, top * 1.15 if top > 0 else 1)


def _grad(ax: Axes, s: SessionSeries, view: PlotView, opts: RuleOptions, alpha: float, latest: bool) -> None:
    ax.set_title("gradient norm (pre-clip, log scale)", loc="left", fontsize=10, pad=3)
    ax.plot(
        s.train_step,
        _positive(s.grad_max),
        color=COLOURS["grad"],
        alpha=alpha * 0.45,
        linewidth=1,
        label=_label(latest and s.grad_max != s.grad_mean, "max"),
    )
    ax.plot(
        s.train_step,
        _positive(s.grad_mean),
        color=COLOURS["grad"],
        alpha=alpha,
        linewidth=1.4,
        label=_label(latest, "mean"),
    )
    if latest:
        ax.set_yscale("log")
        if opts.grad_max is not None:
            label = f"--grad-max {opts.grad_max:g}"
            ax.axhline(opts.grad_max, color=COLOURS["alert"], linestyle="--", linewidth=1, label=label)
        ax.axhline(
            opts.grad_min, color=COLOURS["alert"], linestyle=":", linewidth=1, label=f"--grad-min {opts.grad_min:g}"
        )
        values = [v for ss in view.sessions for v in ss.grad_mean + ss.grad_max if math.isfinite(v) and v > 0]
        lo = min(values + [opts.grad_min])
        hi = max(values + [opts.grad_max if opts.grad_max is not None else opts.grad_min])
        ax.set_ylim(lo / 3, hi * 3)


def _positive(values: list[float]) -> list[float]:
    """`values` for a log scale: zero and negative ones become NaN (a gap in the line)."""
    return [v if math.isfinite(v) and v > 0 else math.nan for v in values]


def _throughput(ax: Axes, s: SessionSeries, view: PlotView, opts: RuleOptions, alpha: float, latest: bool) -> None:
    ax.set_title(f"throughput ({view.throughput.unit})", loc="left", fontsize=10, pad=3)
    ax.plot(s.train_step, s.throughput, color=COLOURS["throughput"], alpha=alpha, linewidth=1.4)
    if latest:
        top = max((v for ss in view.sessions for v in ss.throughput if math.isfinite(v)), default=1.0)
        ax.set_ylim(0, top * 1.25)
        if s.baseline is not None and s.train_step:
            x0 = s.start_step if s.start_step is not None else s.train_step[0]
            x1 = max(s.train_step[-1], s.last_step)
            limit = (1 - opts.throughput_drop) * s.baseline
            what = "baseline" if s.baseline_set else "baseline so far"
            ax.hlines(s.baseline, x0, x1, color=COLOURS["guide"], linewidth=1, label=f"{what} {_eng(s.baseline)}")
            ax.hlines(
                limit,
                x0,
                x1,
                color=COLOURS["alert"],
                linestyle="--",
                linewidth=1,
                label=f"drop below (1-{opts.throughput_drop:g})×baseline",
            )
            ax.axvspan(x0, min(x0 + opts.throughput_baseline_steps, x1), color="#000000", alpha=0.05, linewidth=0)


def _eng(v: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def _metrics(ax: Axes, s: SessionSeries, view: PlotView, opts: RuleOptions, alpha: float, latest: bool) -> None:
    ax.set_title("eval metrics", loc="left", fontsize=10, pad=3)
    names = sorted({n for ss in view.sessions for n in ss.metrics}, key=lambda n: (n != opts.metric, n))
    others = iter(OTHER_METRIC_COLOURS)
    for name in names:
        colour = COLOURS["metric"] if name == opts.metric else next(others, "#7f7f7f")
        if name not in s.metrics:
            continue
        steps, values = s.metrics[name]
        ax.plot(
            steps,
            values,
            color=colour,
            alpha=alpha,
            linewidth=1.6 if name == opts.metric else 1.1,
            marker=_dot(steps),
            markersize=3.5 if name == opts.metric else 2.5,
            label=_label(latest, name),
        )
    if not latest:
        return
    values = [v for ss in view.sessions for _, vs in ss.metrics.values() for v in vs if math.isfinite(v)]
    if values and min(values) >= 0 and max(values) <= 1:
        ax.set_ylim(-0.02, 1.05)
    if any(opts.metric in ss.metrics for ss in view.sessions):
        chance = opts.metric_chance
        ax.axhline(chance, color=COLOURS["guide"], linestyle=":", linewidth=1, label=f"chance {chance:g}")
        ax.axhline(
            opts.metric_min,
            color=COLOURS["alert"],
            linestyle="--",
            linewidth=1,
            label=f"--metric-min {opts.metric_min:g}",
        )
        if chance == 0.5:  # inverted_metric: a two-class metric only
            ax.axhline(1 - opts.metric_min, color=COLOURS["alert"], linestyle=":", linewidth=1)
        first = min(st for ss in view.sessions for st in ss.metrics.get(opts.metric, ([], []))[0])
        if first < opts.metric_after_step:
            ax.axvspan(min(first, 0), opts.metric_after_step, color="#000000", alpha=0.05, linewidth=0)
            ax.annotate(
                f"not judged before step {opts.metric_after_step}",
                (0, 0),
                xycoords="axes fraction",
                xytext=(4, 4),
                textcoords="offset points",
                fontsize=7.5,
                color=COLOURS["guide"],
            )


# The drawing function of each panel (`plot.PANELS`).
PANEL_DRAWERS: dict[str, Callable[..., None]] = {
    "loss": _loss,
    "lr": _lr,
    "grad_norm": _grad,
    "throughput": _throughput,
    "eval_metrics": _metrics,
}
