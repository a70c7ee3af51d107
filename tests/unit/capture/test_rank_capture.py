"""Capture in a real rank entry (`worker/rank_main.py`, a subprocess, no torchrun): what it
attaches to, what it does when a program breaks, shadows or undoes what it attaches to (the
program still runs; the rank's log says what capture could not do). `capture: off`:
tests/e2e/test_integrations.py.

The frameworks here are the program's own stand-ins (a `deepspeed` package with DeepSpeed's
`DeepSpeedEngine.save_checkpoint(save_dir, tag)`, a vendored `accelerate` without what capture
wraps), beside the real torch.distributed.checkpoint."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

RANK_MAIN = Path(__file__).resolve().parents[3] / "worker" / "rank_main.py"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def run_rank(tmp_path: Path, files: dict[str, str]) -> dict:
    code, work = tmp_path / "code", tmp_path / "work"
    logs, ckpt, out = tmp_path / "logs", tmp_path / "ckpt", tmp_path / "out"
    for directory in (work, ckpt, out):
        directory.mkdir(parents=True)
    write(code, files)
    # What an earlier attempt's rank 0, killed while copying a checkpoint, left behind.
    write(ckpt, {".epoch_1.capture-123.tmp/model.safetensors": "half"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHBAY_")}
    env.update(
        RANK="0",
        LAUNCHBAY_EVENTS_FILE=str(tmp_path / "events.jsonl"),
        LAUNCHBAY_CHECKPOINT_DIR=str(ckpt),
        LAUNCHBAY_OUTPUT_DIR=str(out),
    )
    env["LAUNCHBAY_CAPTURE"] = "auto"
    argv = [sys.executable, "-I", "-u", str(RANK_MAIN), "--log-dir", str(logs)]
    done = subprocess.run(
        [*argv, "--script", str(code / "program.py")],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    events = tmp_path / "events.jsonl"
    lines = [json.loads(x) for x in events.read_text().splitlines()] if events.exists() else []
    return {
        "returncode": done.returncode,
        "log": (logs / "rank-0.log").read_text(),
        "events": lines,
        "finished": (logs / "rank-0.finished").exists(),
        "kept": sorted(p.name for p in ckpt.iterdir()),
    }


DEEPSPEED_ENGINE = """
    import os

    class DeepSpeedEngine:
        global_steps = 8

        def save_checkpoint(self, save_dir, tag=None, client_state={}, save_latest=True):
            tag = tag or f"global_step{self.global_steps}"
            os.makedirs(os.path.join(save_dir, tag))
            with open(os.path.join(save_dir, tag, "mp_rank_00_model_states.pt"), "wb") as f:
                f.write(b"PK-not-really")
"""


def test_checkpoints_are_kept_and_tensorboard_read_while_broken_targets_are_said(
    tmp_path: Path,
) -> None:
    files = {
        "accelerate/__init__.py": "",
        "accelerate/accelerator.py": "class Accelerator:\n    pass\n",  # a fork without them
        "deepspeed/__init__.py": "",
        "deepspeed/runtime/__init__.py": "",
        "deepspeed/runtime/engine.py": DEEPSPEED_ENGINE,
        "program.py": """
            import os
            import torch
            import torch.distributed.checkpoint as dcp
            from accelerate.accelerator import Accelerator
            from deepspeed.runtime.engine import DeepSpeedEngine
            from jobs.capture.tfevents import encode_record, encode_scalar_event

            Accelerator()
            DeepSpeedEngine().save_checkpoint("saved")
            dcp.save({"w": torch.ones(2)}, checkpoint_id="saved/step-3", no_dist=True)
            staging = os.path.join(os.environ["LAUNCHBAY_CHECKPOINT_DIR"], ".step-4.tmp")
            dcp.save({"w": torch.ones(2)}, checkpoint_id=staging, no_dist=True)
            dcp.save = lambda *args, **kwargs: None  # the program's own, from now on
            os.makedirs("runs")
            with open("runs/events.out.tfevents.1.host", "wb") as out:
                out.write(encode_record(encode_scalar_event("loss", 0.5, 9, 1234.5)))
            print("the program ran to its end")
        """,
    }
    rank = run_rank(tmp_path, files)
    assert rank["returncode"] == 0, rank["log"]
    assert rank["finished"]
    log = rank["log"]
    assert "the program ran to its end" in log
    assert "capture: could not attach to accelerate.accelerator (AttributeError" in log
    assert "checkpoint.save was replaced by the program after capture attached to it" in log
    kept = [(e["path"], e["step"]) for e in rank["events"] if e["type"] == "checkpoint"]
    assert kept == [("global_step8", 8), ("step-3", 3)]  # not the program's own staging
    assert rank["kept"] == [".launchbay-tensorboard.json", ".step-4.tmp", "global_step8", "step-3"]
    metrics = [e for e in rank["events"] if e["type"] == "metric"]
    assert metrics == [{"type": "metric", "step": 9, "metrics": {"loss": 0.5}, "ts": 1234.5}]


def test_a_program_with_its_own_jobs_package_keeps_it(tmp_path: Path) -> None:
    files = {
        "jobs/__init__.py": "MINE = True\n",
        "program.py": """
            import torch.distributed.checkpoint
            import jobs
            print("own jobs:", getattr(jobs, "MINE", False))
        """,
    }
    rank = run_rank(tmp_path, files)
    assert rank["returncode"] == 0, rank["log"]
    assert "own jobs: True" in rank["log"]
    assert "could not attach to torch.distributed.checkpoint" in rank["log"]
    assert "is not Launchbay's" in rank["log"]
