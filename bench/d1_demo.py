"""D1: the README's first command, `scripts/demo.sh`, on a fresh clone, cold and warm.

A copy of this checkout's tracked files in a temporary directory (as `git clone` leaves
them), with an empty uv cache of its own: the demo's whole run, set-up included (cold), then
again (warm: the venv is there). The baseline, run beside it: `pip install` of the same pins
(torch and requirements.lock) into an empty venv with pip's cache off, as the demo did before
it installed with uv (the development lock too, then). Both install from the same places (this
shell's PIP_FIND_LINKS and package index; pip also reads pip.conf)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Result
from devstack.procs import free_port

REPO = Path(__file__).resolve().parents[1]
PYTHON = os.environ.get("PYTHON", "python3.11")
COLD_GOAL_S, WARM_GOAL_S = 120.0, 15.0


def fresh_clone(target: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target / name, follow_symlinks=False)
    return target


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return took, done.stdout + done.stderr


def pip_baseline(root: Path) -> float:
    """Seconds to make an empty venv and pip install torch and requirements.lock into it."""
    venv = root / "pip-venv"
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    script = (
        f'"{PYTHON}" -m venv "{venv}" && "{venv}/bin/python" -m pip install -q torch==2.13.0 '
        f'&& "{venv}/bin/python" -m pip install -q -r requirements.lock'
    )
    took, _ = timed(["bash", "-c", script], REPO, env)
    return took


def demo_runs(root: Path) -> tuple[float, float, float]:
    """(cold demo, its install alone, warm demo) seconds."""
    clone = fresh_clone(root / "launchbay")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAUNCHBAY_", "VIRTUAL_ENV"))}
    env.update(UV_CACHE_DIR=str(root / "uv-cache"), LAUNCHBAY_DEMO_PORT=str(free_port()))
    cold, said = timed(["scripts/demo.sh"], clone, env)
    installed = sum(int(s) for s in re.findall(r"setup:   done in (\d+) s", said))
    env["LAUNCHBAY_DEMO_PORT"] = str(free_port())
    warm, _ = timed(["scripts/demo.sh"], clone, env)
    return cold, float(installed), warm


def run() -> list[Result]:
    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-demo-"))
    os.chmod(root, 0o711)  # a root worker's job users pass through it to the data dir
    try:
        baseline = pip_baseline(root)
        cold, install, warm = demo_runs(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    pins = "torch 2.13.0 and requirements.lock"
    return [
        Result(
            "D1a",
            "cold `scripts/demo.sh` on a fresh clone (set-up, stack, the digits job, download)",
            f"{cold:.0f} s; ÷ pip's install alone {cold / baseline:.2f} ({baseline:.0f} s)",
            f"≤ {COLD_GOAL_S:.0f} s",
            cold <= COLD_GOAL_S,
            f"uv's cache empty; {sys.platform}, {os.cpu_count()} cores",
        ),
        Result(
            "D1b",
            f"the demo's install (uv, bytecode compiled) ÷ pip install of {pins}, empty venv",
            f"{install / baseline:.2f} ({install:.0f} s ÷ {baseline:.0f} s)",
            "< 1",
            install < baseline,
            "both with empty caches; the demo installed the development lock too before",
        ),
        Result(
            "D1c",
            "warm `scripts/demo.sh` rerun (the venv there)",
            f"{warm:.1f} s; ÷ pip's install alone {warm / baseline:.2f}",
            f"≤ {WARM_GOAL_S:.0f} s",
            warm <= WARM_GOAL_S,
            "the digits job trains about 2 s of it",
        ),
    ]
