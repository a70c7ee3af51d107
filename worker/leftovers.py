"""What a job user's processes leave on the host outside the job's own directories, removed by
uid when the job user is given back, so the next job under that uid finds none of it: its
System V IPC objects (shared memory segments, semaphore sets, message queues) and, where
attempts get no private scratch (`worker.scratch`), its files and directories in ``/tmp``,
``/var/tmp``, ``/dev/shm`` and ``/dev/mqueue``.

Run only when no process of the uid is left (`worker.isolation.JobUser.release`): nothing
can add to what is removed meanwhile. Files are found without following a link and without
leaving each directory's file system; a directory the uid owns goes whole.
"""

import ctypes
import logging
import os
import shutil
import stat

log = logging.getLogger(__name__)

SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")
IPC_RMID = 0
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
# /proc/sysvipc/<table>: the column of an object's id, and how to remove one.
IPC_TABLES = {"shm": "shmid", "sem": "semid", "msg": "msqid"}


def _remove_ipc_object(table: str, ident: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    if table == "shm":
        result = libc.shmctl(ident, IPC_RMID, None)
    elif table == "sem":
        result = libc.semctl(ident, 0, IPC_RMID)
    else:
        result = libc.msgctl(ident, IPC_RMID, None)
    return int(result) == 0


def ipc_objects(uid: int) -> list[tuple[str, int]]:
    """(table, id) of each System V IPC object that `uid` owns or made, in this IPC namespace."""
    found = []
    for table, id_column in IPC_TABLES.items():
        try:
            with open(f"/proc/sysvipc/{table}") as lines:
                header = next(lines).split()
                for line in lines:
                    row = dict(zip(header, line.split(), strict=False))
                    if uid in (int(row["uid"]), int(row["cuid"])):
                        found.append((table, int(row[id_column])))
        except (OSError, StopIteration, KeyError, ValueError):
            continue
    return found


def remove_ipc(uid: int) -> int:
    """Remove every System V IPC object of `uid`; returns how many were removed."""
    removed = 0
    for table, ident in ipc_objects(uid):
        if _remove_ipc_object(table, ident):
            removed += 1
        else:
            log.warning("cannot remove the System V %s %d of uid %d", table, ident, uid)
    return removed


def remove_files(uid: int, roots: tuple[str, ...] = SHARED_DIRS) -> int:
    """Remove what `uid` owns under `roots`; returns how many entries were removed (a directory
    counts once, with what it held)."""
    removed = 0
    for root in roots:
        try:
            top = os.open(root, DIRECTORY_FLAGS)
        except OSError:
            continue
        try:
            removed += _remove_owned(top, uid, os.fstat(top).st_dev)
        finally:
            os.close(top)
    return removed


def _remove_owned(directory: int, uid: int, device: int) -> int:
    removed = 0
    with os.scandir(directory) as entries:
        found = list(entries)
    for entry in found:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_uid == uid:
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry.name, dir_fd=directory, ignore_errors=True)
            else:
                _unlink(entry.name, directory)
            removed += 1
        elif stat.S_ISDIR(info.st_mode) and info.st_dev == device:
            try:
                sub = os.open(entry.name, DIRECTORY_FLAGS, dir_fd=directory)
            except OSError:
                continue
            try:
                removed += _remove_owned(sub, uid, device)
            finally:
                os.close(sub)
    return removed


def _unlink(name: str, directory: int) -> None:
    try:
        os.unlink(name, dir_fd=directory)
    except FileNotFoundError:
        pass


def remove_leftovers(uid: int, *, files: bool) -> None:
    """Remove the uid's IPC objects and, with `files`, what it owns in the shared directories."""
    objects = remove_ipc(uid)
    entries = remove_files(uid) if files else 0
    if objects or entries:
        log.info("uid %d left %d IPC objects and %d files behind: removed", uid, objects, entries)
