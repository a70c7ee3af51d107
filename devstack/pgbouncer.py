"""A private PgBouncer in front of a PostgreSQL server, for the tests of pooled deployments.

Debian's `pgbouncer` package (scripts/install-pgbouncer.sh). PgBouncer refuses to run as root:
started by root, it drops to the `postgres` user (its `user` setting).
"""

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from devstack.procs import free_port, stop, wait_until

PGBOUNCER = "/usr/sbin/pgbouncer"
CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/userlist.txt
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 1000
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = {folder}/pgbouncer.log
pidfile = {folder}/pgbouncer.pid
{user_line}
"""


@contextmanager
def private_pgbouncer(
    database_url: str, pool_mode: str = "transaction", pool_size: int = 5
) -> Iterator[str]:
    """PgBouncer in front of the server of `database_url` (an SQLAlchemy URL); yields the same
    URL through PgBouncer. At most `pool_size` server connections per database and user."""
    if not os.path.exists(PGBOUNCER):
        raise RuntimeError("pgbouncer is not installed (scripts/install-pgbouncer.sh)")
    url = make_url(database_url)
    folder = Path(tempfile.mkdtemp(prefix="launchbay-pgbouncer-"))
    root = os.geteuid() == 0
    listen_port = free_port()
    (folder / "userlist.txt").write_text(f'"{url.username}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        CONFIG.format(
            host=url.host,
            port=url.port or 5432,
            listen_port=listen_port,
            folder=folder,
            pool_mode=pool_mode,
            pool_size=pool_size,
            user_line="user = postgres" if root else "",
        )
    )
    if root:
        shutil.chown(folder, "postgres", "postgres")
        for path in folder.iterdir():
            shutil.chown(path, "postgres", "postgres")
    proc = subprocess.Popen(
        [PGBOUNCER, str(folder / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pooled = url.set(port=listen_port).render_as_string(hide_password=False)
    try:
        libpq = pooled.replace("postgresql+psycopg://", "postgresql://")
        if not wait_until(lambda: _answers(libpq) or proc.poll() is not None, timeout=20):
            raise RuntimeError("pgbouncer did not answer")
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited:\n{_log(folder)}")
        yield pooled
    finally:
        stop(proc, 10)
        shutil.rmtree(folder, ignore_errors=True)


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2, prepare_threshold=None) as conn:
            conn.execute("SELECT 1")
            return True
    except psycopg.Error:
        return False


def _log(folder: Path) -> str:
    try:
        return (folder / "pgbouncer.log").read_text()[-4000:]
    except OSError:
        return ""
