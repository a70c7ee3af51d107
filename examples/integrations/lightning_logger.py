"""Lightning on 2 ranks (DDP, gloo, under torchrun) with `LaunchbayLogger`: metrics, a
checkpoint per epoch registered by the logger, and resume.

`--fail-at-epoch N` makes the first attempt fail as epoch N starts (epochs count from 0):
with `max_retries: 1` the second attempt resumes from the last checkpoint. Lightning is the
job's own requirement.

Its spec is `lightning_logger.yaml`, beside it, which says how to run it:
`launchbay run -f lightning_logger.yaml -- python lightning_logger.py`.
"""

import argparse
import os

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jobs.integrations.lightning import LaunchbayLogger, checkpoint_dir, resume_from_checkpoint


class Regression(L.LightningModule):
    def __init__(self, fail_at_epoch: int) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 1)
        self.fail_at_epoch = fail_at_epoch

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        inputs, targets = batch
        loss = F.mse_loss(self.layer(inputs), targets)
        self.log("loss", loss, sync_dist=True)
        return loss

    def on_train_epoch_start(self) -> None:
        first = os.environ.get("LAUNCHBAY_ATTEMPT", "1") == "1"
        if first and self.fail_at_epoch and self.current_epoch == self.fail_at_epoch:
            raise SystemExit(f"failing on purpose as epoch {self.current_epoch} starts")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fail-at-epoch", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x @ torch.linspace(-1, 1, 8) + 0.5).unsqueeze(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        strategy="ddp",
        max_epochs=args.epochs,
        logger=LaunchbayLogger(),
        log_every_n_steps=1,
        callbacks=[ModelCheckpoint(dirpath=checkpoint_dir(), save_top_k=-1, every_n_epochs=1)],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    resume = resume_from_checkpoint()
    if resume is not None and trainer.is_global_zero:
        print(f"resuming from {os.path.basename(resume)}", flush=True)
    trainer.fit(Regression(args.fail_at_epoch), loader, ckpt_path=resume)


if __name__ == "__main__":
    main()
