"""P13: what capture without edits costs a program. The same Trainer program (Hugging Face's
text-classification guide's shape, nothing of Launchbay in it: `tests/e2e/programs/
capture_trainer.py`, larger) runs as two jobs side by side, one with `capture: auto` and one
with `capture: off`, on the two workers of one stack, in rounds whose order of submission
rotates: both share the machine and whatever else loads it at the same moments, which a
sequence of runs on a shared machine does not (one round in sequence gave ratios from 0.78 to
1.67). Each job's speed is Trainer's own `train_steps_per_second` (its whole `train()`:
steps, evaluations, checkpoints, and with capture the metric lines, the checkpoint copies,
the TensorBoard walk), read from the summary rank 0 prints. A round is two pairs, one
submitted auto first and one off first (the job submitted first starts first, and may run
alone at its end); its ratio, auto ÷ off, is the geometric mean of its pairs'; the result is
the median of the rounds.

The job's packages (transformers, TensorBoard) come from PyPI through the worker's uv, once.
"""

import ast
import math
import re
import statistics
from typing import Any

import httpx

from bench.common import Result, running_stack, upload_code, wait_for_end

ROUNDS = 4  # each: a pair submitted auto first, then a pair submitted off first
GOAL = 0.99
REQUIREMENTS = ["transformers==4.57.1", "tensorboard==2.21.0"]

# The guide's Trainer script on a tiny BERT built from a config (nothing from the Hub): 2 ranks,
# 2 epochs of 4096 sequences, a checkpoint and an evaluation each epoch, a log every 10 steps,
# TensorBoard on (report_to's default, "all"). It writes under LAUNCHBAY_OUTPUT_DIR (the
# working directory is read-only today).
TRAINER_SOURCE = """\
import os

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

VOCAB, LENGTH = 64, 16


class Sequences(torch.utils.data.Dataset):
    def __init__(self, count, seed):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 2, (count,), generator=generator)
        low = torch.randint(2, VOCAB // 2, (count, LENGTH), generator=generator)
        self.inputs = low + self.labels.unsqueeze(1) * (VOCAB // 2 - 2)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.inputs[i], "labels": self.labels[i]}


def compute_metrics(eval_pred):
    predictions, labels = eval_pred
    return {"accuracy": float((np.argmax(predictions, axis=1) == labels).mean())}


os.chdir(os.environ.get("LAUNCHBAY_OUTPUT_DIR", "."))
torch.manual_seed(0)
config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=LENGTH, num_labels=2)
trainer = Trainer(
    model=BertForSequenceClassification(config),
    args=TrainingArguments(
        output_dir="my_awesome_model",
        learning_rate=1e-3,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=16,
        num_train_epochs=2,
        eval_strategy="epoch",
        save_strategy="epoch",
        logging_steps=10,
    ),
    train_dataset=Sequences(4096, seed=1),
    eval_dataset=Sequences(256, seed=2),
    compute_metrics=compute_metrics,
)
trainer.train()
"""

SUMMARY = re.compile(r"\{'train_runtime'.*\}")


def steps_per_second(http: httpx.Client, job_id: str) -> float:
    """Trainer's `train_steps_per_second`, from the summary dict rank 0 printed."""
    lines = http.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0, "limit": 10_000}).json()
    for item in reversed(lines["items"]):
        found = SUMMARY.search(item["line"])
        if found:
            return float(ast.literal_eval(found.group(0))["train_steps_per_second"])
    raise RuntimeError(f"job {job_id} printed no Trainer summary")


def submit(http: httpx.Client, code_id: str, capture: str) -> str:
    spec = {
        "name": f"p13-{capture}",
        "code": {"code_id": code_id, "entrypoint": "trainer.py"},
        "nproc_per_node": 2,
        "device": "cpu",
        "env": {"ACCELERATE_USE_CPU": "1"},
        "environment": {"requirements": REQUIREMENTS},
        "capture": capture,
    }
    response = http.post("/v1/jobs", json=spec)
    response.raise_for_status()
    return str(response.json()["id"])


def side_by_side(http: httpx.Client, stack: Any, code_id: str, order: tuple[str, ...]) -> dict:
    """Each of `order` submitted at once (in that order), run to its end: its steps/s."""
    jobs = {capture: submit(http, code_id, capture) for capture in order}
    for job_id in jobs.values():
        wait_for_end(http, stack, job_id, timeout=900)
    return {capture: steps_per_second(http, job_id) for capture, job_id in jobs.items()}


def run(long: bool = False) -> list[Result]:
    ratios: list[float] = []
    speeds: dict[str, list[float]] = {"auto": [], "off": []}
    by_order: dict[str, list[float]] = {"auto": [], "off": []}  # by the job submitted first
    with running_stack(workers=2) as stack, stack.client() as http:
        code_id = upload_code(http, "trainer.py", TRAINER_SOURCE)
        side_by_side(http, stack, code_id, ("off",))  # builds the environment
        for _ in range(ROUNDS):
            both = []
            for order in (("auto", "off"), ("off", "auto")):
                measured = side_by_side(http, stack, code_id, order)
                for capture, speed in measured.items():
                    speeds[capture].append(speed)
                both.append(measured["auto"] / measured["off"])
                by_order[order[0]].append(both[-1])
            ratios.append(math.sqrt(both[0] * both[1]))
    ratio = statistics.median(ratios)
    auto, off = statistics.median(speeds["auto"]), statistics.median(speeds["off"])
    return [
        Result(
            "P13",
            "capture overhead: steps/s of a Trainer program with `capture: auto` ÷ with "
            "`capture: off`, side by side in one stack, rotated rounds",
            f"{ratio:.3f} (median of {ROUNDS} rounds, range {min(ratios):.3f}–{max(ratios):.3f};"
            f" {auto:.2f} vs {off:.2f} steps/s; pairs submitted auto first "
            f"{statistics.median(by_order['auto']):.3f}, off first "
            f"{statistics.median(by_order['off']):.3f})",
            f"≥ {GOAL}",
            ratio >= GOAL,
            "2 ranks on CPU each, both jobs at once on 2 cores; 512 steps, 2 checkpoints and "
            "evaluations, a log every 10 steps, TensorBoard on; Trainer's train_steps_per_second",
        )
    ]
