"""A chart's series that stays small however long the run: at most `limit` points, spikes kept.

    s = Series(limit=1000)
    for step, loss, t in records:
        s.add(step, loss, t)     # O(1) amortized, bounded memory
    s.points()                   # [[step, value, time], ...], at most 1000, in arrival order
    s.cut((30, True))            # a rollback to step 30: the points after it go

Points fall into buckets of `width` consecutive points. A bucket keeps its lowest and its highest
point (so a one-record loss spike survives any amount of downsampling); when the buckets would
draw more than `limit - 1` points, neighbours merge pairwise and `width` doubles; the latest
point is always the last one drawn. A point carries the time it was logged (or None), so that
a page can draw it against wall time too. Standard library only.
"""

from __future__ import annotations

import math
from typing import Any

# A chart 1000 points wide is already finer than a phone's or a laptop's plot area.
MAX_POINTS = 1000

# A point as the page draws it: [x, y, time or None].
Point = list[Any]
# A bucket: [n, i_lo, x_lo, y_lo, t_lo, i_hi, x_hi, y_hi, t_hi] (i: arrival index, to keep order);
# a list, not a class, because one is touched on every point added.
Bucket = list[Any]
# Where a session that redoes steps cuts the path: (limit, inclusive): a step x stays when
# x < limit, or x == limit and inclusive. Tuples order from the tightest cut to the loosest.
Cut = tuple[float, bool]


def keeps(cut: Cut, x: float) -> bool:
    """Step `x` stays on the path under `cut`."""
    return x < cut[0] or (cut[1] and x == cut[0])


class Series:
    """Min/max-bucket downsampling of a stream of (x, y, t) points; non-finite y values are skipped."""

    __slots__ = ("_buckets", "count", "last", "limit", "width")

    def __init__(self, limit: int = MAX_POINTS) -> None:
        if type(limit) is not int or limit < 2:
            raise ValueError(f"Series.limit must be an int >= 2, got {limit!r}")
        self.limit = limit
        self.width = 1  # points per bucket
        self.count = 0  # finite points added
        self.last: Point | None = None  # the latest point, whatever the buckets kept
        self._buckets: list[Bucket] = []

    def add(self, x: float, y: float | None, t: float | None = None) -> None:
        """Add one point (y None or non-finite: nothing to draw, skipped)."""
        if (type(y) is not float and type(y) is not int) or not math.isfinite(y):
            return
        i = self.count
        self.count += 1
        self.last = [x, y, t]
        b = self._buckets[-1] if self._buckets else None
        if b is None or b[0] >= self.width:
            self._buckets.append([1, i, x, y, t, i, x, y, t])
            # each bucket draws min(n, 2) points; one spare for the latest point
            if len(self._buckets) * min(self.width, 2) > self.limit - 1:
                self._merge()
            return
        b[0] += 1
        if y < b[3]:
            b[1], b[2], b[3], b[4] = i, x, y, t
        if y > b[7]:
            b[5], b[6], b[7], b[8] = i, x, y, t

    def _merge(self) -> None:
        old = self._buckets
        new: list[Bucket] = []
        for k in range(0, len(old), 2):
            a = old[k]
            if k + 1 == len(old):
                new.append(a)
                continue
            b = old[k + 1]
            lo = a if a[3] <= b[3] else b
            hi = a if a[7] >= b[7] else b
            new.append([a[0] + b[0], *lo[1:5], *hi[5:9]])
        self._buckets = new
        self.width *= 2

    def cut(self, cut: Cut) -> None:
        """Drop the points whose step `cut` leaves off the path (the steps a relaunch or a
        rollback redoes). Points arrive in step order along the path, so only the last buckets
        can hold such points."""
        buckets = self._buckets
        while buckets:
            b = buckets[-1]
            lo_ok, hi_ok = keeps(cut, b[2]), keeps(cut, b[6])
            if lo_ok and hi_ok:
                break
            if not lo_ok and not hi_ok:
                buckets.pop()
                self.count -= b[0]
                continue
            kept = b[1:5] if lo_ok else b[5:9]
            self.count -= b[0] - 1  # (the points between the two are not known: an estimate)
            b[0:9] = [1, *kept, *kept]
            break
        if self.last is not None and not keeps(cut, self.last[0]):
            self.last = self._final()

    def _final(self) -> Point | None:
        if not self._buckets:
            return None
        _, i_lo, x_lo, y_lo, t_lo, i_hi, x_hi, y_hi, t_hi = self._buckets[-1]
        return [x_hi, y_hi, t_hi] if i_hi > i_lo else [x_lo, y_lo, t_lo]

    def points(self) -> list[Point]:
        """The kept points as [x, y, t] in arrival order (at most `limit`), ending at the latest."""
        out: list[Point] = []
        for _, i_lo, x_lo, y_lo, t_lo, i_hi, x_hi, y_hi, t_hi in self._buckets:
            if i_lo == i_hi:
                out.append([x_lo, y_lo, t_lo])
            elif i_lo < i_hi:
                out.append([x_lo, y_lo, t_lo])
                out.append([x_hi, y_hi, t_hi])
            else:
                out.append([x_hi, y_hi, t_hi])
                out.append([x_lo, y_lo, t_lo])
        if self.last is not None and (not out or out[-1] != self.last):
            out.append(list(self.last))
        return out
