"""Accounting for the private Slurm (`devstack.slurm`): a private MariaDB server and a
slurmdbd in front of it, so `sacct` answers for jobs the controller has forgotten.

MariaDB gets a data directory of its own (`mariadb-install-db`), its own socket and a free
port on 127.0.0.1, and none of the machine's configuration (`--no-defaults`); slurmdbd logs in
as a user made for it with a random password. slurmdbd reads `slurmdbd.conf` beside the
cluster's `slurm.conf` (it has no option for another path) and listens on a free port.

Needs root (mariadbd and slurmdbd run as root here) and Debian's `slurmdbd` and
`mariadb-server` (`scripts/install-slurm.sh`).
"""

import os
import secrets
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from devstack.procs import free_port, wait_until

BINARIES = ("mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "sacct")
DATABASE = "slurm_acct_db"
DB_USER = "slurm"
# A small server that keeps nothing safe across a crash: it lives as long as one test module.
MARIADB_OPTIONS = (
    "--no-defaults",
    "--skip-log-bin",
    "--skip-name-resolve",
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-file-size=8M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
)


def unavailable() -> str | None:
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"missing {', '.join(missing)} (scripts/install-slurm.sh installs them)"
    return None


def _mariadb_server() -> str:
    """mariadbd lives in /usr/sbin, which a user's PATH may lack."""
    return shutil.which("mariadbd") or "/usr/sbin/mariadbd"


@dataclass
class SlurmAccounting:
    """The database server and slurmdbd; `start` and `stop` are the cluster's to call."""

    root: Path
    db_port: int = field(default_factory=free_port)
    dbd_port: int = field(default_factory=free_port)
    password: str = field(default_factory=lambda: secrets.token_hex(16))

    @property
    def socket(self) -> Path:
        return self.root / "mariadb" / "mariadb.sock"

    def slurm_conf_lines(self, munge_socket: Path) -> str:
        """What `slurm.conf` says about accounting. The connections to slurmdbd (of slurmctld
        and of sacct) take their munge socket from AccountingStoragePass, not AuthInfo."""
        return "\n".join(
            [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=127.0.0.1",
                f"AccountingStoragePort={self.dbd_port}",
                f"AccountingStoragePass={munge_socket}",
            ]
        )

    def install(self) -> subprocess.Popen[bytes]:
        """Start creating the database's files (a few seconds: the caller goes on meanwhile
        and waits for it in `start`)."""
        data = self.root / "mariadb" / "data"
        data.mkdir(parents=True)
        log = open(self.root / "log" / "mariadb-install.out", "ab")  # noqa: SIM115
        return subprocess.Popen(
            [
                "mariadb-install-db",
                *MARIADB_OPTIONS,
                f"--datadir={data}",
                "--user=root",
                "--skip-test-db",
                "--auth-root-authentication-method=socket",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def server_argv(self) -> list[str]:
        base = self.root / "mariadb"
        return [
            _mariadb_server(),
            *MARIADB_OPTIONS,
            f"--datadir={base / 'data'}",
            f"--socket={self.socket}",
            f"--port={self.db_port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={base / 'mariadbd.pid'}",
            f"--tmpdir={base}",
            f"--log-error={self.root / 'log' / 'mariadbd.log'}",
            "--user=root",
        ]

    def create_user(self) -> None:
        """slurmdbd's login: from 127.0.0.1 only, on its database only."""
        sql = (
            f"CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{self.password}';"
            f"GRANT ALL ON {DATABASE}.* TO '{DB_USER}'@'127.0.0.1';"
        )
        subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={self.socket}", "-u", "root", "-e", sql],
            check=True,
            capture_output=True,
            timeout=30,
        )

    def server_ready(self) -> bool:
        done = subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={self.socket}", "-u", "root", "-e", "SELECT 1"],
            capture_output=True,
            timeout=10,
            check=False,
        )
        return done.returncode == 0

    def write_dbd_config(self, conf_dir: Path, munge_socket: Path) -> None:
        conf = conf_dir / "slurmdbd.conf"
        conf.write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={munge_socket}",
                    f"DbdHost={socket.gethostname()}",
                    "DbdAddr=127.0.0.1",
                    f"DbdPort={self.dbd_port}",
                    "SlurmUser=root",
                    f"LogFile={self.root / 'log' / 'slurmdbd.log'}",
                    f"PidFile={self.root / 'ctld' / 'slurmdbd.pid'}",
                    "DebugLevel=info",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self.db_port}",
                    f"StorageUser={DB_USER}",
                    f"StoragePass={self.password}",
                    f"StorageLoc={DATABASE}",
                    "",
                ]
            )
        )
        os.chmod(conf, 0o600)  # slurmdbd refuses a configuration others can read

    def dbd_listening(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(1)
            return sock.connect_ex(("127.0.0.1", self.dbd_port)) == 0

    def wait_installed(self, install: subprocess.Popen[bytes]) -> None:
        if install.wait(120) != 0:
            log = (self.root / "log" / "mariadb-install.out").read_text(errors="replace")
            raise RuntimeError(f"mariadb-install-db failed:\n{log[-4000:]}")

    def wait_server(self, server: subprocess.Popen[bytes]) -> None:
        wait_until(lambda: server.poll() is not None or self.server_ready(), 60, interval=0.2)
        if server.poll() is not None or not self.server_ready():
            log = (self.root / "log" / "mariadbd.log").read_text(errors="replace")
            raise RuntimeError(f"mariadbd did not start:\n{log[-4000:]}")
