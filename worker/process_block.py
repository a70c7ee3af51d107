"""What a fork shows of itself: its command line and environment as ``/proc`` gives them, and
whether it may be traced (dumpable), for the fork server's launchers and ranks (`warm_launcher.py`).

A process started by exec shows the argv and environment it was started with in
``/proc/<pid>/cmdline`` and ``/proc/<pid>/environ``; a fork shows its parent's, whatever it sets
in ``os.environ``. `set_process_block` points the kernel at new copies (``PR_SET_MM_MAP``, no
privilege needed).

Loaded by path by the fork server (standard library only, like `rank_main.py`).
"""

import ctypes
import os
from pathlib import Path

PR_SET_DUMPABLE = 4
PR_SET_MM, PR_SET_MM_MAP = 35, 14
MM_FIELDS = (
    "start_code", "end_code", "start_data", "end_data", "start_brk", "brk", "start_stack",
    "arg_start", "arg_end", "env_start", "env_end",
)  # fmt: skip
# Where /proc/<pid>/stat (proc(5), fields numbered from 1) says what a fork keeps as it is.
STAT_FIELDS = {
    "start_code": 26, "end_code": 27, "start_stack": 28, "start_data": 45, "end_data": 46,
    "start_brk": 47,
}  # fmt: skip
_KEPT: list[object] = []


class _MmMap(ctypes.Structure):
    """The kernel's ``struct prctl_mm_map``."""

    _fields_ = [
        *((name, ctypes.c_uint64) for name in MM_FIELDS),
        ("auxv", ctypes.c_void_p),
        ("auxv_size", ctypes.c_uint32),
        ("exe_fd", ctypes.c_uint32),
    ]


def set_process_block(argv: list[str], env: dict[str, str]) -> bool:
    """Make ``/proc/self/cmdline`` and ``/proc/self/environ`` say `argv` and `env`, as after an
    exec (a fork would show the fork server's): what ``ps``, py-spy and the worker's search for a
    job's processes by their environment (`worker.orphans`) read. ``PR_SET_MM_MAP`` needs no
    privilege; False where the kernel refuses it."""
    try:
        stat = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        field = {name: int(stat[number - 3]) for name, number in STAT_FIELDS.items()}
        args = b"".join(os.fsencode(a) + b"\0" for a in argv)
        block = b"".join(os.fsencode(f"{k}={v}") + b"\0" for k, v in env.items()) or b"\0"
        args_buffer = ctypes.create_string_buffer(args, len(args))
        env_buffer = ctypes.create_string_buffer(block, len(block))
        _KEPT[:] = [args_buffer, env_buffer]  # the kernel reads them for the process's life
        libc = ctypes.CDLL(None, use_errno=True)
        libc.sbrk.restype = ctypes.c_void_p
        mm = _MmMap(
            **field,
            brk=libc.sbrk(0),
            arg_start=ctypes.addressof(args_buffer),
            arg_end=ctypes.addressof(args_buffer) + len(args),
            env_start=ctypes.addressof(env_buffer),
            env_end=ctypes.addressof(env_buffer) + len(block),
            auxv=None,
            auxv_size=0,
            exe_fd=0xFFFFFFFF,
        )
        return (
            int(libc.prctl(PR_SET_MM, PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0)) == 0
        )
    except (OSError, AttributeError, ValueError, IndexError):
        return False


def set_dumpable(value: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass
