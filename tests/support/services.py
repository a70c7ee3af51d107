"""Moved to `devstack.services` (and `devstack.s3server`), which the benchmarks share; the tests
keep importing them here."""

from devstack.s3server import S3Server, private_s3
from devstack.services import RedisServer, postgres_database, postgres_server, private_redis

__all__ = [
    "RedisServer",
    "S3Server",
    "private_redis",
    "private_s3",
    "postgres_server",
    "postgres_database",
]
