"""Run a function on N local ranks joined in a gloo group: for testing DDP code on CPU.

    def check(ctx: DistContext) -> float:
        return reduce_mean(torch.tensor(float(ctx.rank))).item()

    assert run_ranks(check, world_size=2) == [0.5, 0.5]

Each rank is a fresh Python process (``python -m tests.support.ranks``) given torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT on a free loopback port); it calls
setup_distributed(), runs ``fn(ctx, *args)``, tears the group down and sends back what
`fn` returned. Plain subprocesses in their own sessions, rather than multiprocessing, so
nothing (no resource tracker) outlives the call: a rank that fails fails the call and its
peers are killed at once, and a run that outlives `timeout_s` is killed whole.

run_torchrun() runs a script or module under the real launcher the same way, for tests
of whole programs (torchrun puts each rank in its own session, so killing torchrun's
process group alone would leave the ranks running).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from jobs.runtime.distributed import setup_distributed, teardown_distributed


class RankFailed(RuntimeError):
    """A rank exited with an error; the message ends with the tail of its output."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _locate(fn: Callable[..., Any]) -> tuple[str, str, str | None]:
    """How a rank finds `fn`: module and name, plus its file for modules that are not
    importable by name in a fresh interpreter (pytest's importlib mode, __main__)."""
    if "<locals>" in fn.__qualname__ or fn.__name__ == "<lambda>":
        raise ValueError("run_ranks needs a module-level function (each rank imports it)")
    return fn.__module__, fn.__qualname__, inspect.getsourcefile(fn)


def _resolve(module: str, qualname: str, path: str | None) -> Callable[..., Any]:
    target: Any
    try:
        if module == "__main__":
            raise ImportError("__main__ is the rank runner here")
        target = importlib.import_module(module)
    except ImportError:
        if path is None:
            raise
        spec = importlib.util.spec_from_file_location(f"_run_ranks_{Path(path).stem}", path)
        if spec is None or spec.loader is None:
            raise
        target = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(target)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _rank_main(work_dir: Path, rank: int) -> None:
    """A rank's life: find the function, join the group, run, send the result back."""
    with open(work_dir / "call.pkl", "rb") as handle:
        call = pickle.load(handle)
    fn = _resolve(*call["where"])
    ctx = setup_distributed()
    try:
        result = fn(ctx, *call["args"])
    except BaseException:
        # When it was raised: the first rank to fail is the cause, its peers the echo.
        (work_dir / f"failed-{rank}").write_text(repr(time.time()))
        raise
    finally:
        teardown_distributed()
    with open(work_dir / f"result-{rank}.pkl", "wb") as handle:
        pickle.dump(result, handle)


def _failed_at(work_dir: Path, rank: int) -> float:
    """When the rank's function raised; never, for a rank that died otherwise or was killed."""
    marker = work_dir / f"failed-{rank}"
    return float(marker.read_text()) if marker.exists() else float("inf")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill a rank that is still running, with its process group (it leads one)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    process.wait()


def _wait(processes: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """Until every rank has exited, one has failed, or time is up (TimeoutError)."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in processes]
        if all(code is not None for code in codes) or any(code for code in codes):
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"ranks still running after {timeout_s:.0f}s (killed)")
        time.sleep(0.05)


def run_ranks(
    fn: Callable[..., Any],
    world_size: int = 2,
    *,
    args: Sequence[Any] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> list[Any]:
    """``fn(ctx, *args)`` on `world_size` CPU ranks; the results, indexed by rank.

    `fn` must be a module-level function, its arguments and result picklable. `env` is
    added to every rank's environment (LAUNCHBAY_EVENTS_FILE, ...). Raises RankFailed
    when a rank fails and TimeoutError when the ranks outlive `timeout_s`.
    """
    base_env = {
        **_child_env(
            {
                "LAUNCHBAY_DEVICE": "cpu",
                "LAUNCHBAY_BACKEND": "gloo",
                "LAUNCHBAY_COLLECTIVE_TIMEOUT_S": str(max(1, int(timeout_s))),
                **(env or {}),
            }
        ),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
    }
    base_env.pop("TORCHELASTIC_RUN_ID", None)
    with tempfile.TemporaryDirectory(prefix="run-ranks-") as work:
        work_dir = Path(work)
        with open(work_dir / "call.pkl", "wb") as handle:
            pickle.dump({"where": _locate(fn), "args": tuple(args)}, handle)
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for rank in range(world_size):
                with open(work_dir / f"output-{rank}.txt", "wb") as output:
                    processes.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "tests.support.ranks", work, str(rank)],
                            env={**base_env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                            stdout=output,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                    )
            _wait(processes, timeout_s)
        finally:
            for process in processes:
                _kill_group(process)
        failed = [r for r, p in enumerate(processes) if p.returncode != 0]
        if failed:
            rank = min(failed, key=lambda r: (_failed_at(work_dir, r), r))
            tail = (work_dir / f"output-{rank}.txt").read_text(errors="replace")[-4000:]
            raise RankFailed(f"rank {rank} exited with {processes[rank].returncode}:\n{tail}")
        results = []
        for rank in range(world_size):
            with open(work_dir / f"result-{rank}.pkl", "rb") as handle:
                results.append(pickle.load(handle))
        return results


def _kill_tree(pid: int) -> None:
    """Kill a process, its descendants and their process groups (each rank leads one)."""
    try:
        root = psutil.Process(pid)
        family = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in family:
        for kill in (lambda p=proc: os.killpg(p.pid, signal.SIGKILL), proc.kill):
            try:
                kill()
            except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
                pass


def _child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    merged = {**os.environ, **(env or {})}
    # The ranks import what this process can (jobs included), installed or not.
    paths = [p for p in (merged.get("PYTHONPATH", ""), *sys.path) if p]
    merged["PYTHONPATH"] = os.pathsep.join(paths)
    merged.setdefault("OMP_NUM_THREADS", "1")  # what torchrun would set, minus its banner
    return merged


def run_torchrun(
    args: Sequence[str],
    *,
    nproc_per_node: int = 2,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc_per_node N ARGS...`` with this interpreter.

    `args` is what follows the launcher's options: a script and its arguments, or
    ``["-m", "package.module", ...]``. Output (stdout and stderr together) is returned,
    not checked. --standalone lets torchrun pick a free rendezvous port itself. A run
    past `timeout_s` is killed, ranks included, and raises TimeoutError.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc_per_node}",
        *args,
    ]
    # torchrun's log directory and the ranks' temporary files in one removed after the run,
    # not left in the host's /tmp.
    with tempfile.TemporaryDirectory(prefix="launchbay-torchrun-") as scratch:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env={**_child_env(env), "TMPDIR": (env or {}).get("TMPDIR", scratch)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(process.pid)
            output, _ = process.communicate()
            raise TimeoutError(
                f"torchrun still running after {timeout_s:.0f}s:\n{output[-4000:]}"
            ) from None
        finally:
            if process.poll() is None:  # interrupted: take the ranks down too
                _kill_tree(process.pid)
    return subprocess.CompletedProcess(command, process.returncode, output, None)


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]), int(sys.argv[2]))
