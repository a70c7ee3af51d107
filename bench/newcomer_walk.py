"""W1: a newcomer's walk from the README to their own script running, as a script: the
commands the README gives, in order, counted and timed.

    .venv/bin/python -m bench.newcomer_walk      (or `python -m bench walk`)

The walk, as README.md says it (its quick start, then "Your own program"):

    git clone ... launchbay && cd launchbay        a copy of this checkout's tracked files
    scripts/demo.sh                                set up, the demo job, stopped
    scripts/demo.sh --keep                         the stack stays up (in its own shell)
    export LAUNCHBAY_API_URL=... LAUNCHBAY_TOKEN=...   the line the demo printed
    export PATH=$PWD/.venv/bin:$PATH
    cd ~/src/mnist-ddp                             a plain DDP script of the newcomer's own
    launchbay run --nproc-per-node 2 -- python train.py --epochs 3

`scripts/test.sh`, the README's second command, is not on the way to one's own script (it is
the whole test suite): it is not walked. Cold: a fresh clone and an empty uv cache of its own;
warm: the same walk again in a second fresh clone, the uv cache as the first walk left it.
Everything the walk starts is stopped (the kept stack with Ctrl-C, as a person would; anything
left after that is killed and said), and the job users a root worker makes for it have a prefix
of the walk's own and are removed at the end.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.common import Result
from bench.d1_demo import fresh_clone, timed
from devstack.procs import free_port

JOB_USER_PREFIX = "lbwalk-"
KEEP_READY = re.compile(r"export LAUNCHBAY_API_URL=(\S+) LAUNCHBAY_TOKEN=(\S+)")
GOAL_S = 300.0
OWN_SCRIPT = '''\
"""A plain DDP program, as a newcomer has one: no Launchbay in it."""
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(512, 8)
y = x.sum(dim=1, keepdim=True)
for epoch in range(args.epochs):
    for start in range(rank * 32, 512, 32 * world):
        loss = torch.nn.functional.mse_loss(model(x[start : start + 32]), y[start : start + 32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
'''


@dataclass
class Walk:
    """The commands walked, each with its seconds (0 for what a person types at once)."""

    steps: list[tuple[str, float]] = field(default_factory=list)

    def step(self, command: str, seconds: float = 0.0) -> None:
        self.steps.append((command, seconds))
        print(f"walk: {seconds:6.1f} s  {command}", flush=True)

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.steps)


def newcomer_env(root: Path) -> dict[str, str]:
    """This shell's environment without Launchbay's settings or a venv, with the walk's own
    uv cache, a free port, and job users of its own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAUNCHBAY_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env.update(
        UV_CACHE_DIR=str(root / "uv-cache"),
        LAUNCHBAY_DEMO_PORT=str(free_port()),
        LAUNCHBAY_JOB_USER_PREFIX=JOB_USER_PREFIX,
        LAUNCHBAY_JOB_USER_LEASE_DIR=str(root / "job-users"),
    )
    return env


def start_kept_stack(clone: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str, str]:
    """`scripts/demo.sh --keep` in a session of its own, until it prints the export line."""
    demo = subprocess.Popen(
        ["scripts/demo.sh", "--keep"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    said = []
    assert demo.stdout is not None
    for line in demo.stdout:
        said.append(line)
        if found := KEEP_READY.search(line):
            return demo, found[1], found[2]
    demo.wait()
    raise RuntimeError("scripts/demo.sh --keep ended without its export line:\n" + "".join(said))


def stop_kept_stack(demo: subprocess.Popen[str], clone: Path) -> list[str]:
    """Ctrl-C to the demo, as a person would; what is left of it then is killed and named."""
    demo.send_signal(signal.SIGINT)
    try:
        demo.wait(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGKILL)
        demo.wait()
    return kill_leftovers(clone)


def kill_leftovers(root: Path) -> list[str]:
    """Processes whose command line names something under `root` (the clone's api, worker,
    ranks or redis-server): killed, and returned to be said."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.pid != os.getpid() and (
                str(root) in cmdline or str(proc.info["cwd"] or "").startswith(str(root))
            ):
                left.append(f"{proc.pid} {cmdline[:120]}")
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return left


def walk_once(root: Path, name: str) -> tuple[Walk, list[str]]:
    """One walk in a fresh clone under `root`; the walk and what had to be killed after."""
    walk = Walk()
    env = newcomer_env(root)
    started = time.monotonic()
    clone = fresh_clone(root / name)
    walk.step("git clone <launchbay> launchbay", time.monotonic() - started)
    walk.step("cd launchbay")
    took, _ = timed(["scripts/demo.sh"], clone, env)
    walk.step("scripts/demo.sh", took)
    env["LAUNCHBAY_DEMO_PORT"] = str(free_port())
    started = time.monotonic()
    demo, api_url, token = start_kept_stack(clone, env)
    left: list[str] = []
    try:
        walk.step("scripts/demo.sh --keep   (in a shell of its own)", time.monotonic() - started)
        shell = {**env, "LAUNCHBAY_API_URL": api_url, "LAUNCHBAY_TOKEN": token}
        walk.step("export LAUNCHBAY_API_URL=... LAUNCHBAY_TOKEN=...   (pasted)")
        shell["PATH"] = f"{clone / '.venv' / 'bin'}:{shell['PATH']}"
        walk.step("export PATH=$PWD/.venv/bin:$PATH")
        own = root / f"{name}-mnist-ddp"
        own.mkdir()
        (own / "train.py").write_text(OWN_SCRIPT)
        walk.step("cd ~/src/mnist-ddp")
        argv = ["launchbay", "run", "--nproc-per-node", "2", "--"]
        took, said = timed([*argv, "python", "train.py", "--epochs", "3"], own, shell)
        if "succeeded (completed)" not in said:
            raise RuntimeError(f"the newcomer's own script did not succeed:\n{said[-3000:]}")
        walk.step(" ".join(argv) + " python train.py --epochs 3", took)
    finally:
        left = stop_kept_stack(demo, clone)
        remove_job_users(clone, env)
    return walk, left


def remove_job_users(clone: Path, env: dict[str, str]) -> None:
    launchbay = clone / ".venv" / "bin" / "launchbay"
    if os.geteuid() == 0 and launchbay.exists():
        subprocess.run(
            [str(launchbay), "worker", "--remove-job-users"],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )


def run() -> list[Result]:
    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-walk-"))
    os.chmod(root, 0o711)  # a root worker's job users pass through it to the data dir
    try:
        cold, cold_left = walk_once(root, "cold")
        warm, warm_left = walk_once(root, "warm")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    left = cold_left + warm_left
    machine = f"{sys.platform}, {os.cpu_count()} cores"
    return [
        Result(
            "W1a",
            "a newcomer's walk, README to their own DDP script succeeded: commands typed",
            f"{len(cold.steps)} commands",
            "≤ 8",
            len(cold.steps) <= 8,
            "clone, cd, demo, demo --keep, 2 exports, cd, launchbay run; not scripts/test.sh",
        ),
        Result(
            "W1b",
            "the walk's seconds, cold (fresh clone, empty uv cache of its own)",
            f"{cold.seconds:.0f} s ("
            + ", ".join(f"{s:.0f}" for _, s in cold.steps if s >= 0.5)
            + ")",
            f"≤ {GOAL_S:.0f} s",
            cold.seconds <= GOAL_S,
            f"{machine}; left running after Ctrl-C: {len(left) or 'nothing'}",
        ),
        Result(
            "W1c",
            "the walk's seconds, warm (a second fresh clone, the uv cache kept)",
            f"{warm.seconds:.0f} s ("
            + ", ".join(f"{s:.0f}" for _, s in warm.steps if s >= 0.5)
            + ")",
            f"≤ {GOAL_S:.0f} s",
            warm.seconds <= GOAL_S,
            machine,
        ),
    ]


if __name__ == "__main__":
    for result in run():
        print(result.row())
