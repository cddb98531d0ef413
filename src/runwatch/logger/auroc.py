"""The area under the ROC curve, by ranks: the one implementation that the demo training and the
framework integrations share. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable


def auroc(scores: Iterable[float], labels: Iterable[float]) -> float | None:
    """Area under the ROC curve by ranks (ties get their mean rank); None with a single class.

    `labels` above 0.5 are positives. Equal to the Mann-Whitney U statistic over n_pos * n_neg:
    1.0 ranks every positive above every negative, 0.5 is chance, 0.0 is a perfect inversion.
    """
    pairs = sorted(zip((float(s) for s in scores), (float(y) > 0.5 for y in labels)))
    n_pos = sum(1 for _, positive in pairs if positive)
    n_neg = len(pairs) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = 0.0
    i = 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        mean_rank = (i + j) / 2 + 1
        rank_sum += mean_rank * sum(1 for k in range(i, j + 1) if pairs[k][1])
        i = j + 1
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
