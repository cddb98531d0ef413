"""The logger's once-per-window conversion of tensors to floats (convert.as_float_list)."""

from __future__ import annotations

import json
import math

import pytest

from runwatch import RunLogger
from runwatch.logger.convert import as_float_list

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


def _one_by_one(values: list) -> list[float]:
    """The reference: each value on its own, tensors through float64 (a sync each on a GPU)."""
    return [
        float(v.detach().reshape(()).to(torch.float64)) if isinstance(v, torch.Tensor) else float(v) for v in values
    ]


def _same(a: list[float], b: list[float]) -> bool:
    return all(type(x) is float and (x == y or (math.isnan(x) and math.isnan(y))) for x, y in zip(a, b)) and len(
        a
    ) == len(b)


T = torch.tensor
CASES = {
    "python numbers": [1, 2.5, True, False, 0],
    "numpy scalars": [np.float32(0.1), np.int64(7), np.float64(0.3), 1.0],
    "float dtypes": [T(0.1), T(0.1, dtype=torch.float16), T(0.1, dtype=torch.bfloat16), T(0.1, dtype=torch.float64)],
    "floats and bools": [T(0.1), T(True), T(False), T(2.5)],
    "big integers stay exact": [T(2**53 - 1), T(0.1), T(2**40 + 3), T(False)],
    "small integer dtypes": [T(3, dtype=torch.int32), T(5, dtype=torch.uint8), T(-2, dtype=torch.int8)],
    "only bools": [T(True), T(False), T(True)],
    "one-element shapes": [T([0.3]), T(0.3), T([[0.7]]), T([1])],
    "non-finite": [T(float("nan")), T(float("inf")), T(-float("inf")), 1.0],
    "mixed with numbers": [T(1.5), 2.0, T(True), False, np.float32(1.0), T(7)],
    "requires grad": [T(1.5, requires_grad=True) * 3, T(2.0, requires_grad=True)],
}


@pytest.mark.parametrize("values", CASES.values(), ids=CASES.keys())
def test_as_float_list_equals_one_by_one(values):
    assert _same(as_float_list(values), _one_by_one(values))


@pytest.mark.parametrize("values", [[T([1.0, 2.0])], [T(1.0), T([1.0, 2.0])], [T([1.0, 2.0]), T([3.0, 4.0])]])
def test_many_element_tensor_is_refused_as_before(values):
    with pytest.raises(RuntimeError, match=r"shape '\[\]' is invalid for input of size 2"):
        as_float_list(values)


def _count_conversions(monkeypatch) -> dict:
    counts = {"item": 0, "tolist": 0, "__float__": 0, "__bool__": 0, "__int__": 0}
    for name in counts:
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _name=name, _original=original, **k):
            counts[_name] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return counts


def _steps(log: RunLogger, as_tensor) -> None:
    for i in range(12):
        log.step(
            loss=as_tensor(1.0 / (i + 1)),
            lr=as_tensor(0.5**i),
            grad_norm=as_tensor(0.25 * i),
            clipped=as_tensor(i % 3 == 0),
            skipped=as_tensor(i == 5),
            qk_observed=as_tensor(8),
            qk_clipped=as_tensor(i % 2),
            qk_max_logit=as_tensor(90.0 + i),
        )


def test_lr_and_qk_tensors_share_the_one_conversion_of_the_window(tmp_path, monkeypatch):
    recipe = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": 100.0}
    counts = _count_conversions(monkeypatch)
    with RunLogger(tmp_path / "t", recipe=recipe, window=4, hardware={}) as log:
        _steps(log, lambda v: torch.tensor(v, dtype=torch.float64) if isinstance(v, float) else torch.tensor(v))
        assert counts == {"item": 0, "tolist": 3, "__float__": 0, "__bool__": 0, "__int__": 0}
    with RunLogger(tmp_path / "f", recipe=recipe, window=4, hardware={}) as log:
        _steps(log, lambda v: v)

    def windows(d):
        with open(d / "metrics.jsonl") as f:
            recs = [json.loads(line) for line in f]
        keep = ("step", "updates", "skipped", "loss", "lr", "grad_norm", "grad_clipped_fraction", "qk_clip")
        return [{k: r.get(k) for k in keep} for r in recs if r["event"] == "train"]

    assert windows(tmp_path / "t") == windows(tmp_path / "f")  # the same values as plain floats
