"""A small Lightning module whose validation metric follows a script, so the epoch a patience rule stops
at is known in advance; the weights really train (SGD on a linear regression)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.nn import functional


class Scripted(pl.LightningModule):
    def __init__(self, script: list[float], rank_offsets: list[float] | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(8, 1)
        self.example_input_array = torch.randn(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layer(x)
        return out

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = functional.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        offsets = self.hparams["rank_offsets"] or [0.0] * 16
        value = self.hparams["script"][self.current_epoch] + offsets[self.global_rank]
        self.log("val_loss", torch.tensor(value), sync_dist=False)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def loaders() -> tuple[torch.utils.data.DataLoader[Any], torch.utils.data.DataLoader[Any]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    data = torch.utils.data.TensorDataset(x, y)
    return (
        torch.utils.data.DataLoader(data, batch_size=16),
        torch.utils.data.DataLoader(data, batch_size=32),
    )


def cpu_trainer(callback: pl.Callback, root: str | Path, epochs: int, **options: Any) -> pl.Trainer:
    """A quiet CPU Trainer with an epoch budget and no checkpointing but the callback's."""
    return pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        **options,
    )


def fit_ddp(url: str, run_key: str, root: str, script: list[float], rules: list[dict[str, Any]]) -> None:
    """Two CPU ranks (ddp_spawn) under the Plateau callback; rank 1's metric sits 0.5 above rank 0's."""
    from plateau_tracker.integrations.lightning import PlateauCallback

    callback = PlateauCallback(
        project="lightning",
        experiment="ddp",
        monitor="val_loss",
        mode="min",
        rules=rules,
        url=url,
        run_key=run_key,
    )
    trainer = cpu_trainer(callback, root, len(script), devices=2, strategy="ddp_spawn")
    train, val = loaders()
    trainer.fit(Scripted(script, rank_offsets=[0.0, 0.5]), train, val)


if __name__ == "__main__":
    # A process of its own: spawned ranks re-import the main module, which inside pytest may be anything.
    import json
    import sys
    import warnings

    warnings.simplefilter("ignore")
    fit_ddp(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5]))
