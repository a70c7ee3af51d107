"""`launchbay storage migrate`: copy what a deployment kept in its data dir (checkpoints and
uploaded code) into an object store, so it can switch LAUNCHBAY_ARTIFACT_STORE to it.

Rows never change: a checkpoint's `path` is its key in every store. Each object is copied
whole or not at all (the store's put is atomic) and checked against the sha256 the registry
holds (a directory: its canonical tar stream, built from its manifest), so the command can be
stopped at any point and run again: what is in the store already, at its registered size, is
skipped; what is missing is copied. Run it before switching, then once more after (workers
still on the old setting may have registered more meanwhile).
"""

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import col, select

from jobs.contract.data_dir import DataLayout
from service.artifacts import ArtifactStore, ObjectMissing, StoreError, code_key
from service.artifacts.tree import TreeDigest, TreeRefused, iter_tar, scan_tree
from service.db import session_scope
from service.models import Checkpoint, CodeUpload

log = logging.getLogger(__name__)
CHUNK = 8 * 1024 * 1024


@dataclass
class MigrationReport:
    copied: int = 0
    present: int = 0
    missing: list[str] = field(default_factory=list)  # registered, but not in the data dir
    failed: list[str] = field(default_factory=list)  # could not be copied, or did not match

    def line(self) -> str:
        return (
            f"{self.copied} copied, {self.present} already in the store, "
            f"{len(self.missing)} missing from the data dir, {len(self.failed)} failed"
        )


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def _checkpoint_bytes(data_dir: Path, row: Checkpoint) -> Iterator[bytes] | None:
    local = data_dir / row.path
    if row.kind == "dir":
        files = [(str(f["path"]), int(f["size"])) for f in row.manifest or []]
        return iter_tar(local, files) if local.is_dir() and files else None
    return _file_chunks(local) if local.is_file() else None


def _code_bytes(root: Path) -> Iterator[bytes] | None:
    try:
        return TreeDigest(root, scan_tree(root)).stream() if root.is_dir() else None
    except (TreeRefused, OSError):
        return None


def _in_store(store: ArtifactStore, key: str, size: int | None) -> bool:
    try:
        found = store.size(key)
    except ObjectMissing:
        return False
    return size is None or found == size


def _copy(
    store: ArtifactStore,
    key: str,
    source: Iterator[bytes] | None,
    sha256: str | None,
    report: MigrationReport,
    content_type: str | None = None,
) -> None:
    if source is None:
        report.missing.append(key)
        return
    try:
        stored = store.put(key, source, content_type=content_type)
    except (StoreError, TreeRefused, OSError) as exc:
        report.failed.append(f"{key}: {exc}")
        return
    if sha256 is not None and stored.sha256 != sha256:
        store.delete([key])
        report.failed.append(f"{key}: its sha256 is {stored.sha256}, registered {sha256}")
        return
    report.copied += 1


def migrate_to_store(engine: Engine, data_dir: Path, store: ArtifactStore) -> MigrationReport:
    """Copy every live checkpoint and every uploaded code in `data_dir` into `store`."""
    data_dir = data_dir.resolve()
    report = MigrationReport()
    with session_scope(engine) as session:
        rows = list(
            session.exec(
                select(Checkpoint)
                .where(col(Checkpoint.deleted_at).is_(None))
                .order_by(col(Checkpoint.created_at))
            )
        )
        code_ids = sorted(set(session.exec(select(CodeUpload.code_id))))
    for row in rows:
        if _in_store(store, row.path, row.size):
            report.present += 1
            continue
        media = "application/x-tar" if row.kind == "dir" else None
        _copy(store, row.path, _checkpoint_bytes(data_dir, row), row.sha256, report, media)
    for code_id in code_ids:
        key, root = code_key(code_id), DataLayout(data_dir).upload(code_id)
        if _in_store(store, key, None):
            report.present += 1
            continue
        _copy(store, key, _code_bytes(root), None, report)
    log.info("storage migrate: %s", report.line())
    return report
