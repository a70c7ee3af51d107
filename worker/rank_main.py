"""The first code each rank runs: point its output at the rank's own log file, then run the program.

torchrun (or, for the `python` launcher, the worker itself) starts

    python -I -u rank_main.py --log-dir DIR [--local-rank-arg=auto|dash|underscore]
        (--module NAME | --script PATH) ARGS

and this file:

- has the kernel SIGKILL this rank when its launcher dies (``PR_SET_PDEATHSIG``), so no rank
  outlives a launcher that could not stop it (one SIGKILLed, say), and exits at once if the
  launcher is already gone (``LAUNCHBAY_LAUNCHER_PID``, set by `lifeline.py`, names it);
- sends fds 1 and 2 to ``DIR/rank-<RANK>.log`` (appended to across elastic restarts), so each
  rank's stdout and stderr land in one file, in the order they were written;
- with ``--local-rank-arg``, puts ``--local-rank=<LOCAL_RANK>`` before ARGS, as the legacy
  ``torch.distributed.launch`` did (``--local_rank=`` with ``=underscore``, as it did before
  torch 2.0; with ``=auto``, the spelling the script's source names, `local_rank_flag`);
- runs the program in this very process, as ``python -m NAME`` / ``python PATH`` would (runpy),
  so the rank's PID is the program's and torchrun's signals reach it directly;
- on an uncaught exception, writes ``DIR/rank-<RANK>.error.json`` (and torchelastic's own error
  file) before exiting 1 as Python does, so the worker can name the failing rank and its error.
- notes the process group the rank joins, and whether it ran collectives on it, in
  ``DIR/rank-<RANK>.group`` (`rank_group.py`); for the `python` launcher (``--children``), has
  each process the program starts log to its own file and note its group too
  (`rank_child.py`);
- with ``LAUNCHBAY_CAPTURE=auto`` (the spec's `capture`), starts Launchbay's capture before the
  program (`jobs/capture`, loaded by its path: the program's integrations attach themselves on
  import, rank 0 reads TensorBoard files) and finishes it after (`run_captured`);
- when the program returns (or exits 0), writes ``DIR/rank-<RANK>.finished``, as the SDK's
  `distributed()` does when it is left (the same file, written here without importing the
  SDK), then releases a process group the program left open (collected, then destroyed):
  torch + gloo sometimes abort a rank at interpreter exit after its program finished
  (SIGABRT, "terminate called without an active exception"), and the worker then reads the
  job's results as complete only where every rank had finished (`worker.outcome`).

It is run as a script, not imported as `worker.rank_main`: user code in the working directory
could hold a `worker` package of its own. For the same reason it imports only the standard
library, and it resets ``sys.path[0]`` to what plain Python would have put there.
"""

import ctypes
import gc
import importlib.util
import json
import os
import runpy
import signal
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

USAGE = (
    "usage: rank_main.py --log-dir DIR [--local-rank-arg[=auto|dash|underscore]] [--children] "
    "(--module NAME | --script PATH) ..."
)
SPELLINGS = {"dash": "--local-rank", "underscore": "--local_rank"}
PR_SET_PDEATHSIG = 1
# Copies of the contract's names (`jobs.contract.env`, `jobs.contract.rank_files`): this file
# imports nothing of Launchbay; a unit test holds them equal
# (tests/unit/worker/test_standalone_copies.py), the error record's fields included.
LAUNCHER_PID_ENV = "LAUNCHBAY_LAUNCHER_PID"
CAPTURE_ENV = "LAUNCHBAY_CAPTURE"
RANK_LOG = "rank-{}.log"
RANK_ERROR = "rank-{}.error.json"
RANK_FINISHED = "rank-{}.finished"
CAPTURE_PACKAGE = Path(__file__).resolve().parents[1] / "jobs" / "capture"
# After a failed program, the most its last TensorBoard scalars may hold the rank up.
CAPTURE_AFTER_ERROR_S = 10.0


def die_with_launcher() -> None:
    """SIGKILL this rank when its parent (the launcher) exits; exit now if it already has.

    The parent it should have is the launcher `lifeline.py` recorded (unless this process is
    that launcher: the `python` launcher, whose parent the lifeline checked), else the parent
    it has now. The same code as `lifeline.die_with_parent`: this file imports no `worker`.
    """
    recorded = os.environ.get(LAUNCHER_PID_ENV, "")
    if recorded.isdigit() and int(recorded) != os.getpid():
        expected = int(recorded)
    else:
        expected = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != expected:
        os._exit(128 + signal.SIGKILL)


def local_rank_flag(spelling: str, kind: str, target: str) -> str:
    """The flag for `spelling`; `auto`: `--local_rank` when a script's source names only that
    spelling (an argparse of the torch < 2.0 tutorials), else `--local-rank`."""
    if spelling in SPELLINGS:
        return SPELLINGS[spelling]
    if kind == "script":
        try:
            source = Path(target).read_text(errors="replace")
        except OSError:
            source = ""
        if "--local_rank" in source and "--local-rank" not in source:
            return SPELLINGS["underscore"]
    return SPELLINGS["dash"]


def parse_argv(argv: list[str]) -> tuple[Path, str | None, str, str, list[str]]:
    """(log dir, the --local-rank spelling or None, "module" | "script", target, args); the
    flag ``--children`` is read by `main`."""
    log_dir: Path | None = None
    local_rank_arg: str | None = None
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag == "--log-dir" and i + 1 < len(argv):
            log_dir = Path(argv[i + 1])
            i += 2
        elif flag == "--children":
            i += 1
        elif flag == "--local-rank-arg" or flag.startswith("--local-rank-arg="):
            local_rank_arg = flag.partition("=")[2] or "auto"
            i += 1
        elif flag in ("--module", "--script") and i + 1 < len(argv) and log_dir is not None:
            return log_dir, local_rank_arg, flag[2:], argv[i + 1], argv[i + 2 :]
        else:
            break
    raise SystemExit(USAGE)


def redirect_output(log_file: Path) -> None:
    """Make fds 1 and 2 (all this process and its children print) append to `log_file`."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _user_frames(exc: BaseException) -> traceback.StackSummary:
    """The traceback without this file's and runpy's frames, which say nothing about the error."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = {os.path.abspath(__file__), os.path.abspath(runpy.__file__ or ""), "<frozen runpy>"}
    start = 0
    while start < len(frames) and (
        frames[start].filename in ours or os.path.abspath(frames[start].filename) in ours
    ):
        start += 1
    return traceback.StackSummary.from_list(frames[start:] or frames)


def format_error(exc: BaseException) -> tuple[str, str]:
    """("Type: message", the traceback as Python would print it, minus the launcher frames)."""
    summary = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    described = traceback.TracebackException.from_exception(exc)
    described.stack = _user_frames(exc)
    return summary, "".join(described.format())


def record_error(log_dir: Path, rank: str, summary: str, text: str, exit_code: int) -> None:
    """Leave the error where the worker (and torchrun) look for it; never raise from here."""
    now = time.time()
    record = {
        "rank": int(rank) if rank.isdigit() else 0,
        "local_rank": int(os.environ.get("LOCAL_RANK", "0") or 0),
        "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
        "pid": os.getpid(),
        "exit_code": exit_code,
        "error": summary,
        "traceback": text,
        "ts": now,
    }
    try:
        target = log_dir / RANK_ERROR.format(rank)
        temp = target.with_name(f".{target.name}.tmp")
        temp.write_text(json.dumps(record))
        os.replace(temp, target)
        elastic_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
        if elastic_file and exit_code == 1:
            # The format of torch's ErrorHandler.record_exception, which torchrun reads back.
            data = {
                "message": {
                    "message": summary,
                    "extraInfo": {"py_callstack": text, "timestamp": str(int(now))},
                }
            }
            Path(elastic_file).parent.mkdir(parents=True, exist_ok=True)
            Path(elastic_file).write_text(json.dumps(data))
    except OSError:
        pass


def finish(log_dir: Path, rank: str) -> None:
    """The program finished: say so, then release the process group it left open. Never
    raises."""
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    try:
        (log_dir / RANK_FINISHED.format(rank)).write_text(json.dumps({"restart": restart}))
    except OSError:
        pass
    dist = sys.modules.get("torch.distributed")  # imported by the program, if at all
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            # DDP wrappers sit in reference cycles that keep the gloo group alive until
            # interpreter exit, where its threads may abort the rank (the SDK does the same).
            gc.collect()
            dist.destroy_process_group()
    except Exception:  # the program's results are complete whatever teardown says
        pass


def _set_program_path(directory: str) -> None:
    """Put the program's directory first on sys.path, as plain Python would: in place of this
    file's directory, or, under ``-I`` (which adds none), in front."""
    if sys.flags.safe_path:
        sys.path.insert(0, directory)
    else:
        sys.path[0] = directory


def load_private(name: str, path: Path, *, package: bool = False) -> ModuleType:
    """Launchbay's module at `path`, loaded once per process under the private name
    ``_launchbay_<name>``: a warm rank finds it loaded by its fork server, a cold one loads it
    here, from the source, which the job user cannot cache."""
    private = f"_launchbay_{name}"
    if private in sys.modules:
        return sys.modules[private]
    locations = [str(path.parent)] if package else None
    spec = importlib.util.spec_from_file_location(
        private, path, submodule_search_locations=locations
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[private]
        raise
    return module


def load_capture() -> ModuleType:
    """Launchbay's capture package (`jobs/capture`), under the private name
    ``_launchbay_capture``."""
    return load_private("capture", CAPTURE_PACKAGE / "__init__.py", package=True)


def note_groups(log_dir: Path, rank: str, *, children: bool) -> None:
    """Note the process group this rank joins (`rank_group.py`); with `children`, have the
    processes the program starts log and note theirs as ranks of their own (`rank_child.py`)."""
    try:
        rank_child = load_private("rank_child", Path(__file__).with_name("rank_child.py"))
        rank_child.load_sibling("rank_group").watch(log_dir, None if children else rank)
        if children:
            rank_child.adopt_children(log_dir)
    except Exception as exc:  # the program runs whatever happens here
        print(f"[launchbay] process groups not noted: {exc!r}", file=sys.stderr)


def run_program(kind: str, target: str, args: list[str]) -> None:
    if kind == "module":
        sys.argv = [target, *args]
        _set_program_path(os.getcwd())
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(target)
        sys.argv = [target, *args]
        _set_program_path(os.path.dirname(script))
        runpy.run_path(script, run_name="__main__")


def start_capture() -> Any:
    """`capture: auto`: Launchbay's capture session (`jobs/capture`, standard library only),
    loaded by its path under a private name, before the program's directory is on sys.path;
    None when off or when it cannot start (said in the log: the program runs anyway)."""
    if os.environ.get(CAPTURE_ENV) != "auto":
        return None
    try:
        return load_capture().start(CAPTURE_PACKAGE.parents[1])
    except Exception as exc:
        print(f"[launchbay] capture: could not start ({exc})", file=sys.stderr)
        return None


def run_captured(kind: str, target: str, args: list[str]) -> None:
    """`run_program` inside a capture session (`start_capture`), finished however it ends:
    fully when it returned, briefly after an error, not at all when it is interrupted."""
    session = start_capture()
    budget: float | None = 0.0
    try:
        run_program(kind, target, args)
        budget = None
    except SystemExit as exc:
        budget = None if exc.code in (None, 0) else CAPTURE_AFTER_ERROR_S
        raise
    except Exception:
        budget = CAPTURE_AFTER_ERROR_S
        raise
    finally:
        if session is not None and budget is None:
            session.finish()
        elif session is not None and budget:
            session.finish(budget)


def main() -> None:
    die_with_launcher()
    log_dir, local_rank_arg, kind, target, args = parse_argv(sys.argv[1:])
    rank = os.environ.get("RANK", "0") or "0"
    redirect_output(log_dir / RANK_LOG.format(rank))
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if restart not in ("", "0"):
        print(f"[launchbay] rank {rank} started again (elastic restart {restart})", file=sys.stderr)
    if local_rank_arg is not None:
        flag = local_rank_flag(local_rank_arg, kind, target)
        args = [f"{flag}={os.environ.get('LOCAL_RANK', '0')}", *args]
    note_groups(log_dir, rank, children="--children" in sys.argv[1 : sys.argv.index(f"--{kind}")])
    try:
        run_captured(kind, target, args)
    except SystemExit as exc:
        code = exc.code
        if code not in (None, 0):
            exit_code = code if isinstance(code, int) else 1
            record_error(log_dir, rank, f"SystemExit: {code}", "", exit_code)
        else:
            finish(log_dir, rank)
        raise
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        summary, text = format_error(exc)
        record_error(log_dir, rank, summary, text, 1)
        sys.stderr.write(text)
        sys.stderr.flush()
        raise SystemExit(1) from None
    finish(log_dir, rank)


if __name__ == "__main__":
    main()
