"""Where checkpoints and uploaded code are kept: the artifact store (`ArtifactStore`), the
data dir (`LocalStore`, the default) or an S3-compatible bucket (`S3Store`), chosen by
LAUNCHBAY_ARTIFACT_STORE. See base.py for the contract every store keeps."""

import os
from functools import lru_cache
from pathlib import Path

from jobs.contract.data_dir import CHECKPOINTS, CODE
from service.artifacts.base import ArtifactStore, ObjectMissing, StoredObject, StoreError
from service.artifacts.local import LocalStore
from service.settings import Settings

__all__ = [
    "SECRET_ENV",
    "ArtifactStore",
    "LocalStore",
    "ObjectMissing",
    "StoreError",
    "StoredObject",
    "checkpoints_prefix",
    "code_key",
    "open_store",
    "store_for",
]


# The stores' credentials in the environment (S3Store's identity: keys, profiles, web-identity
# token files), kept from the ranks (`worker.passed_env`); here, so that S3's client is not
# imported for it.
SECRET_ENV = frozenset({"AWS_*"})


def code_key(code_id: str) -> str:
    """The store's object of an upload: its unpacked files as a canonical tar (tree.py)."""
    return f"{CODE}/{code_id}.tar"


def checkpoints_prefix(job_id: str) -> str:
    """Where a job's checkpoints are, as in the data dir (`checkpoints/<job>/<path>`)."""
    return f"{CHECKPOINTS}/{job_id}"


def open_store(settings: Settings) -> ArtifactStore:
    """A new store for the settings (the S3 client is imported only when one is asked for)."""
    return _open(settings.artifact_store, settings.s3_endpoint_url, settings.data_dir)


def _open(artifact_store: str, endpoint_url: str | None, data_dir: Path) -> ArtifactStore:
    if artifact_store == "local":
        return LocalStore(data_dir)
    from service.artifacts.s3 import S3Store

    return S3Store.from_url(artifact_store, endpoint_url=endpoint_url)


@lru_cache(maxsize=4)
def _cached(
    artifact_store: str, endpoint_url: str | None, data_dir: str, pid: int
) -> ArtifactStore:
    return _open(artifact_store, endpoint_url, Path(data_dir))


def store_for(settings: Settings) -> ArtifactStore:
    """The process's one store for these settings (its client and connections are reused; a
    forked process, such as a worker's work horse, makes its own: a client's threads do not
    survive a fork)."""
    return _cached(
        settings.artifact_store, settings.s3_endpoint_url, str(settings.data_dir), os.getpid()
    )
