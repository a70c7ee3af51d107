"""Capture for programs that never heard of Launchbay: each module here attaches Launchbay to
one framework from the outside (wrapping a few of its methods), when `jobs.capture`'s import
hook sees the program import it. Each imports its framework; none is imported otherwise.

- `transformers`: Trainer's logs and `checkpoint-N/` directories; a retry resumes
  (`train(resume_from_checkpoint=...)`).
- `lightning`: what the module logs, every checkpoint `Trainer.save_checkpoint` writes
  (`ModelCheckpoint`'s included); a retry resumes (`fit(ckpt_path=...)`).
- `accelerate`: what `Accelerator.log` is given, `save_state` directories; a retry loads the
  state (`load_state`) before the first batch.
- `checkpointing`: DeepSpeed's `global_stepN/` and `torch.distributed.checkpoint` directories.

An integration the program added itself (`LaunchbayCallback`, `LaunchbayLogger`,
`LaunchbayTracker`) is left to do its work: nothing is reported twice.
"""

import importlib
from types import ModuleType

from jobs.integrations.attach.common import CaptureHost

MODULES = {
    "transformers": "jobs.integrations.attach.transformers",
    "lightning": "jobs.integrations.attach.lightning",
    "accelerate": "jobs.integrations.attach.accelerate",
    "deepspeed": "jobs.integrations.attach.checkpointing",
    "dcp": "jobs.integrations.attach.checkpointing",
}


def attach(framework: str, module: ModuleType, capture: CaptureHost) -> None:
    """Attach the integration for `framework` to its just-imported `module`."""
    integration = importlib.import_module(MODULES[framework])
    integration.attach(framework, module, capture)
