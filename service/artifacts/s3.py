"""The `s3` artifact store: a bucket (and prefix) on AWS or any S3-compatible endpoint (MinIO,
Ceph RGW, GCS interoperability), through obstore (the Rust `object_store` crate of Apache
Arrow; docs/benchmarks.md says why it was chosen over boto3).

Credentials and region come from the standard `AWS_*` variables (obstore reads them, as the
AWS SDKs do); LAUNCHBAY_S3_ENDPOINT_URL names a non-AWS endpoint, which is then addressed
path-style. Uploads of a stream are multipart (parts of `PART_BYTES`, several in flight),
and an object becomes visible only when its upload completes. Transient errors are retried
by the client (`RETRY`); what is still failing then is a StoreError.
"""

import hashlib
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import BaseError, NotFoundError
from obstore.store import S3Store as ObstoreS3

from service.artifacts.base import ArtifactStore, ObjectMissing, StoredObject, StoreError

# obstore raises FileNotFoundError for a missing object; the stub names NotFoundError.
MISSING = (NotFoundError, FileNotFoundError)
PART_BYTES = 5 * 1024 * 1024
PARTS_IN_FLIGHT = 12
READ_CHUNK = 4 * 1024 * 1024
RETRY: Any = {
    "max_retries": 4,
    "retry_timeout": timedelta(seconds=30),
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5)},
}


def parse_store_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket/prefix`."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"not an s3://bucket/prefix URL: {url!r}")
    return parts.netloc, parts.path.strip("/")


class _Hashing:
    """Passes chunks through while hashing and counting them."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = chunks
        self.digest = hashlib.sha256()
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.digest.update(chunk)
            self.size += len(chunk)
            yield chunk


class S3Store(ArtifactStore):
    name = "s3"
    remote = True

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None) -> None:
        self.bucket, self.prefix = bucket, prefix
        config: dict[str, Any] = {}
        client: dict[str, Any] = {"timeout": timedelta(minutes=5)}
        if endpoint_url:
            config.update(endpoint=endpoint_url, virtual_hosted_style_request=False)
            client["allow_http"] = endpoint_url.startswith("http://")
        self.client = ObstoreS3(
            bucket,
            prefix=prefix or None,
            client_options=client,  # type: ignore[arg-type]
            retry_config=RETRY,
            **config,
        )

    @classmethod
    def from_url(cls, url: str, *, endpoint_url: str | None = None) -> "S3Store":
        bucket, prefix = parse_store_url(url)
        return cls(bucket, prefix, endpoint_url)

    def put(
        self, key: str, chunks: Iterable[bytes], content_type: str | None = None
    ) -> StoredObject:
        hashing = _Hashing(chunks)
        attributes: Any = {"Content-Type": content_type} if content_type else None
        try:
            obstore.put(
                self.client,
                key,
                iter(hashing),
                attributes=attributes,
                chunk_size=PART_BYTES,
                max_concurrency=PARTS_IN_FLIGHT,
            )
        except BaseError as exc:
            raise StoreError(f"cannot store {key}: {exc}") from exc
        except OSError as exc:  # the connection, below the client's own errors
            raise StoreError(f"cannot store {key}: {exc}") from exc
        return StoredObject(key, hashing.size, hashing.digest.hexdigest())

    def size(self, key: str) -> int:
        try:
            return int(obstore.head(self.client, key)["size"])
        except MISSING:
            raise ObjectMissing(f"no object {key!r}") from None
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot look up {key}: {exc}") from exc

    def get(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        options: Any = {}
        if start or end is not None:
            if end is not None and end <= start:
                return iter(())
            options["range"] = (start, end) if end is not None else {"offset": start}
        try:
            result = obstore.get(self.client, key, options=options)
        except MISSING:
            raise ObjectMissing(f"no object {key!r}") from None
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot read {key}: {exc}") from exc
        return self._stream(key, result)

    @staticmethod
    def _stream(key: str, result: Any) -> Iterator[bytes]:
        try:
            for chunk in result.stream(min_chunk_size=READ_CHUNK):
                yield bytes(chunk)
        except (BaseError, OSError) as exc:
            raise StoreError(f"reading {key} failed: {exc}") from exc

    def delete(self, keys: Iterable[str]) -> None:
        wanted = list(keys)
        if not wanted:
            return
        try:
            obstore.delete(self.client, wanted)
        except MISSING:
            pass
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot delete {wanted}: {exc}") from exc

    def delete_prefix(self, prefix: str) -> None:
        try:
            for batch in obstore.list(self.client, prefix=f"{prefix.rstrip('/')}/"):
                keys = [meta["path"] for meta in batch]
                if keys:
                    obstore.delete(self.client, keys)
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot delete {prefix}/: {exc}") from exc

    def presign_get(self, key: str, expires_s: int) -> str | None:
        try:
            return str(obstore.sign(self.client, "GET", key, timedelta(seconds=expires_s)))
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot sign a URL for {key}: {exc}") from exc
