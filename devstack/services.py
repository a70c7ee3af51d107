"""Private Redis and PostgreSQL servers for a test session.

Redis is always a private server on a free port (tests restart it on purpose). PostgreSQL
is the machine's server on 127.0.0.1:5432 when it answers, else a throwaway cluster made
with initdb; either way each session works in a database of its own, dropped at the end.
Tests that stop the database use a throwaway cluster of their own (`private_postgres`).
"""

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devstack.procs import free_port, wait_until


@dataclass
class RedisServer:
    port: int
    dir: Path
    # The addresses it listens on; the first is the one `url()`, start and stop use. Any other
    # than 127.0.0.1 turns protected mode off (no password: any client that can reach it).
    bind: tuple[str, ...] = ("127.0.0.1",)
    # Required of every client (`--requirepass`) when set; redis-server hides its own argv.
    password: str | None = None

    def url(self, db: int = 0, host: str | None = None) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{host or self.bind[0]}:{self.port}/{db}"

    def start(self) -> None:
        exposed = set(self.bind) != {"127.0.0.1"}
        subprocess.run(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                *self.bind,
                *(["--protected-mode", "no"] if exposed else []),
                *(["--requirepass", self.password] if self.password else []),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "yes",
                "--dir",
                str(self.dir),
                "--pidfile",
                str(self.dir / "redis.pid"),
                "--logfile",
                str(self.dir / "redis.log"),
            ],
            check=True,
            capture_output=True,
        )
        client = redis.Redis(host=self.bind[0], port=self.port, password=self.password)
        if not wait_until(lambda: _pings(client), timeout=10):
            raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        # No retries: once the server is down, redis-py's default retries only add seconds.
        client = redis.Redis(
            host=self.bind[0],
            port=self.port,
            password=self.password,
            retry=Retry(NoBackoff(), 0),
            socket_timeout=2,
        )
        try:
            client.shutdown(nosave=True)
        except redis.exceptions.ConnectionError:
            pass
        wait_until(lambda: not _pings(client), timeout=10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False


@contextmanager
def private_redis(
    bind: tuple[str, ...] = ("127.0.0.1",), password: str | None = None
) -> Iterator[RedisServer]:
    folder = Path(tempfile.mkdtemp(prefix="launchbay-redis-"))
    server = RedisServer(port=free_port(), dir=folder, bind=bind, password=password)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _pg_answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


@dataclass
class PostgresCluster:
    """A PostgreSQL cluster owned by the postgres user, on a free port, in a folder of its own;
    tests that take the database away stop and start it (never the machine's own server)."""

    folder: Path
    port: int
    bindir: str

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self) -> str:
        """A libpq URL without a database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}"

    def _as_postgres(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True)

    def init(self) -> None:
        self._as_postgres(
            f"{self.bindir}/initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust"
        )

    def start(self) -> None:
        self._as_postgres(
            f"{self.bindir}/pg_ctl",
            "-D",
            str(self.data),
            "-w",
            "-l",
            str(self.folder / "pg.log"),
            "-o",
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1",
            "start",
        )

    def stop(self, mode: str = "immediate") -> None:
        self._as_postgres(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")


@contextmanager
def private_postgres() -> Iterator[PostgresCluster]:
    """A running throwaway cluster (`PostgresCluster`), removed afterwards."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        raise RuntimeError("no PostgreSQL binaries are installed")
    folder = Path(tempfile.mkdtemp(prefix="launchbay-pg-"))
    shutil.chown(folder, "postgres", "postgres")
    cluster = PostgresCluster(folder=folder, port=free_port(), bindir=bins[-1])
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        try:
            cluster.stop()
        except subprocess.CalledProcessError:
            pass  # not running (a test left it stopped)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[str]:
    """A libpq URL (no database) of a PostgreSQL server this session may create databases on."""
    system = "postgresql://postgres@127.0.0.1:5432"
    if _pg_answers(f"{system}/postgres"):
        yield system
        return
    with private_postgres() as cluster:
        yield cluster.url()


@contextmanager
def postgres_database(server_url: str, template: str | None = None) -> Iterator[str]:
    """A fresh database, empty or a copy of the database `template` of the same server (which
    nobody may be connected to meanwhile); yields its SQLAlchemy URL and drops it afterwards."""
    name = f"launchbay_test_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    try:
        yield f"{server_url.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    finally:
        with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
