"""Jobs for tests/test_bench.py, run as `python tests/bench_jobs.py KIND` by `runwatch bench`.

lightning   a real Lightning `Trainer.fit()` of a tiny classifier with runwatch's callback
raise       a RunLogger loop that logs 2 updates, then fails with a Python traceback
silent      a process that logs nothing and exits 3
"""

from __future__ import annotations

import sys
import warnings


def lightning_job() -> None:
    warnings.filterwarnings("ignore")
    import lightning as L
    import torch

    from runwatch.integrations.lightning import RunwatchCallback

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 8), torch.randn(4096))
    trainer = L.Trainer(
        max_steps=10_000,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[RunwatchCallback()],
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=16))


def raising_job() -> None:
    from runwatch.logger.metrics import RunLogger

    recipe = {"batch_size": 4, "seq_len": 1, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}
    with RunLogger(None, recipe=recipe) as log:
        for step in range(2):
            log.step(loss=1.0, lr=0.1, grad_norm=1.0)
        print("loading batch 3", flush=True)
        raise ValueError("boom: batch 3 is empty")


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "lightning":
        lightning_job()
    elif kind == "raise":
        raising_job()
    elif kind == "silent":
        sys.exit(3)
