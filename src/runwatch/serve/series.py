"""A chart's series that stays small however long the run: at most `limit` points, spikes kept.

    s = Series(limit=1000)
    for step, loss in records:
        s.add(step, loss)        # O(1) amortized, bounded memory
    s.points()                   # [[step, value], ...], at most 1000, in arrival order

Points fall into buckets of `width` consecutive points. A bucket keeps its lowest and its highest
point (so a one-record loss spike survives any amount of downsampling); when the buckets would
draw more than `limit - 1` points, neighbours merge pairwise and `width` doubles; the latest
point is always the last one drawn. Standard library only.
"""

from __future__ import annotations

import math

__all__ = ["MAX_POINTS", "Point", "Series"]

# A chart 1000 points wide is already finer than a phone's or a laptop's plot area.
MAX_POINTS = 1000

# A point as the page draws it: [x, y].
Point = list[float]
# A bucket: [n, i_lo, x_lo, y_lo, i_hi, x_hi, y_hi] (i: arrival index, to keep order); a list, not a
# class, because one is touched on every point added.
Bucket = list[float]


class Series:
    """Min/max-bucket downsampling of a stream of (x, y) points; non-finite y values are skipped."""

    __slots__ = ("_buckets", "count", "last", "limit", "width")

    def __init__(self, limit: int = MAX_POINTS) -> None:
        if type(limit) is not int or limit < 2:
            raise ValueError(f"Series.limit must be an int >= 2, got {limit!r}")
        self.limit = limit
        self.width = 1  # points per bucket
        self.count = 0  # finite points added
        self.last: Point | None = None  # the latest point, whatever the buckets kept
        self._buckets: list[Bucket] = []

    def add(self, x: float, y: float | None) -> None:
        """Add one point (y None or non-finite: nothing to draw, skipped)."""
        if (type(y) is not float and type(y) is not int) or not math.isfinite(y):
            return
        i = self.count
        self.count += 1
        self.last = [x, y]
        b = self._buckets[-1] if self._buckets else None
        if b is None or b[0] >= self.width:
            self._buckets.append([1, i, x, y, i, x, y])
            # each bucket draws min(n, 2) points; one spare for the latest point
            if len(self._buckets) * min(self.width, 2) > self.limit - 1:
                self._merge()
            return
        b[0] += 1
        if y < b[3]:
            b[1], b[2], b[3] = i, x, y
        if y > b[6]:
            b[4], b[5], b[6] = i, x, y

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
            hi = a if a[6] >= b[6] else b
            new.append([a[0] + b[0], lo[1], lo[2], lo[3], hi[4], hi[5], hi[6]])
        self._buckets = new
        self.width *= 2

    def points(self) -> list[Point]:
        """The kept points as [x, y] pairs in arrival order (at most `limit`), ending at the latest."""
        out: list[Point] = []
        for _, i_lo, x_lo, y_lo, i_hi, x_hi, y_hi in self._buckets:
            if i_lo == i_hi:
                out.append([x_lo, y_lo])
            elif i_lo < i_hi:
                out.append([x_lo, y_lo])
                out.append([x_hi, y_hi])
            else:
                out.append([x_hi, y_hi])
                out.append([x_lo, y_lo])
        if self.last is not None and (not out or out[-1] != self.last):
            out.append(list(self.last))
        return out
