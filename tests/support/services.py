"""Moved to `devstack.services`, which the benchmarks share; the tests keep importing it here."""

from devstack.services import RedisServer, postgres_database, postgres_server, private_redis

__all__ = ["RedisServer", "private_redis", "postgres_server", "postgres_database"]
