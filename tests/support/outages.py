"""Taking the database away for a moment, as the outage tests do: a SQLite write-locked by
another connection (one that holds a write transaction open, as a backup or a stuck writer
would), or a PostgreSQL whose server is stopped (a private cluster, never the machine's)."""

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.engine import make_url

from devstack.services import PostgresCluster


@dataclass
class DatabaseOutage:
    url: str
    # The cluster behind a PostgreSQL url; None for SQLite.
    cluster: PostgresCluster | None = None
    is_away: bool = False
    _lock: sqlite3.Connection | None = None

    @property
    def kind(self) -> str:
        return "sqlite" if self.cluster is None else "postgres"

    def begin(self) -> None:
        assert not self.is_away
        if self.cluster is not None:
            self.cluster.stop(mode="fast")
        else:
            path = make_url(self.url).database
            assert path, self.url
            self._lock = sqlite3.connect(path, isolation_level=None, timeout=10)
            self._lock.execute("BEGIN IMMEDIATE")
        self.is_away = True

    def end(self) -> None:
        """Bring the database back (nothing when it is not away)."""
        if not self.is_away:
            return
        if self.cluster is not None:
            self.cluster.start()
        elif self._lock is not None:
            self._lock.execute("ROLLBACK")
            self._lock.close()
            self._lock = None
        self.is_away = False

    @contextmanager
    def away(self) -> Iterator[None]:
        """The database away inside the block, back after it (whatever the block raised)."""
        self.begin()
        try:
            yield
        finally:
            self.end()
