"""A Lightning program in the shape of Lightning's bug report model
(examples/pytorch/bug_report/bug_report_model.py: `RandomDataset`, `BoringModel`,
`Trainer(default_root_dir=os.getcwd(), ...)`, `trainer.fit(model, train_dataloaders=...,
val_dataloaders=...)`), run as the docs run DDP under torchrun: `Trainer(accelerator="cpu",
devices=2, strategy="ddp")`, with a `ModelCheckpoint(save_last=True)` as Lightning's
checkpointing guide adds one. Nothing of Launchbay in it: Lightning's default logger
(TensorBoard's, which the job installs).

Not the model's: the first line of `run` moves into LAUNCHBAY_OUTPUT_DIR, because the job's
working directory is not writable yet (remove it once it is), and, with KILL_RANK_AT_EPOCH set,
rank 1 is killed outright (SIGKILL) as that epoch starts in the first attempt: the fault the
test injects.
"""

import os
import signal

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset


class RandomDataset(Dataset):
    def __init__(self, size, length):
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self):
        return self.len


class BoringModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        loss = self(batch).sum()
        self.log("train_loss", loss)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        loss = self(batch).sum()
        self.log("valid_loss", loss)

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.01)

    def on_train_epoch_start(self):
        kill_at = os.environ.get("KILL_RANK_AT_EPOCH")
        first = os.environ.get("LAUNCHBAY_ATTEMPT") == "1"
        if kill_at and first and self.current_epoch == int(kill_at) and self.global_rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)


def run():
    train_data = DataLoader(RandomDataset(32, 64), batch_size=2)
    val_data = DataLoader(RandomDataset(32, 64), batch_size=2)
    model = BoringModel()
    trainer = Trainer(
        default_root_dir=os.getcwd(),
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=3,
        log_every_n_steps=4,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(save_last=True)],
    )
    trainer.fit(model, train_dataloaders=train_data, val_dataloaders=val_data)


if __name__ == "__main__":
    run()
