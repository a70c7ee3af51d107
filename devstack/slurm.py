"""A private single-machine Slurm cluster: munged with its own key and socket, slurmctld and
one or more slurmd, on free ports, with every file under one directory, and stopped with
everything it started.

The configuration is `slurm.conf.in` beside this module (placeholders in `{braces}`). It
keeps Slurm out of the machine's own state: no systemd, no /etc/slurm, no /run/munge. Node
daemons track processes with `proctrack/linuxproc` (no cgroup plugin; `cgroups=True` turns on
Slurm's cgroup plugins, which enforce `--mem`), and the scheduler runs at once on each
submission (`SchedulerParameters`), so a job starts within about a second.

Accounting is off unless asked for (`accounting=True`: a private MariaDB and slurmdbd, see
`devstack.slurm_accounting`, so `sacct` knows the jobs the controller forgot after
`min_job_age_s`); without it `sacct` has nothing and the executor reads `squeue` alone.

Needs root (munged and slurmd run as root here) and Debian's `slurm-wlm` and `munge`, and for
accounting `slurmdbd` and `mariadb-server` (`scripts/install-slurm.sh`).
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from devstack import slurm_accounting
from devstack.procs import free_port, wait_until
from devstack.slurm_accounting import SlurmAccounting

CONF_TEMPLATE = Path(__file__).with_name("slurm.conf.in")
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun")
PARTITION = "lbtest"
# No cgroup plugin: processes are tracked by parentage, tasks are not bound, memory is no
# resource and no limit.
NO_CONFINEMENT = """ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectTypeParameters=CR_CPU"""
# Slurm's cgroup plugins (cgroup v1 here): each step in a memory cgroup limited to its
# allocation; memory is a resource, so `--mem` is one (512 MiB per CPU when not asked).
CGROUP_CONFINEMENT = """ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=512"""
CGROUP_CONF = """CgroupPlugin=autodetect
CgroupMountpoint=/sys/fs/cgroup
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedSwapSpace=0
"""
# Same nodes, higher priority tier: its jobs preempt those of PARTITION.
URGENT_PARTITION = f"{PARTITION}-urgent"


def unavailable(accounting: bool = False) -> str | None:
    """Why a private Slurm (with accounting, if asked) cannot run here, or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"missing {', '.join(missing)} (scripts/install-slurm.sh installs them)"
    if os.geteuid() != 0:
        return "a private Slurm needs root (munged, slurmd)"
    return slurm_accounting.unavailable() if accounting else None


@dataclass(frozen=True)
class SlurmNode:
    """One node daemon: its Slurm node name, the host name it reports and its address."""

    name: str
    address: str = "127.0.0.1"
    # The network namespace (`ip netns` name) to run slurmd in. The node then also gets a UTS
    # namespace whose host name is its node name, and a mount namespace where each file of
    # `etc` is mounted over its namesake in /etc (hosts: the cluster's names, as DNS would
    # give them; resolv.conf: no name server the namespace cannot reach).
    netns: str | None = None
    etc: tuple[Path, ...] = ()


@dataclass
class SlurmCluster:
    root: Path
    nodes: list[SlurmNode] = field(default_factory=list)
    cpus_per_node: int = 8
    controller_address: str = "127.0.0.1"
    ctld_port: int = field(default_factory=free_port)
    slurmd_port: int = field(default_factory=free_port)
    # Keep accounting (slurmdbd and its database): sacct then answers for ended jobs.
    accounting: bool = False
    # Confine jobs with Slurm's cgroup plugins, so `--mem` is enforced. slurmd makes its
    # cgroups under `/sys/fs/cgroup/<controller>/slurm_<node name>`, shared by every Slurm
    # on the machine: give such a cluster node names of its own.
    cgroups: bool = False
    # How long the controller keeps an ended job (then squeue no longer shows it).
    min_job_age_s: int = 900
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_in_s: float = 0.0
    # Of started_in_s, the time spent on accounting (the database and slurmdbd).
    accounting_started_in_s: float = 0.0
    dbd: SlurmAccounting | None = None

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes = [SlurmNode(socket.gethostname())]
        if self.accounting:
            self.dbd = SlurmAccounting(self.root)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def env(self) -> dict[str, str]:
        """What a Slurm client (sbatch, squeue...) needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        node_lines = "\n".join(
            f"NodeName={n.name} NodeHostname={n.name} NodeAddr={n.address} "
            f"CPUs={self.cpus_per_node} RealMemory=4096 State=UNKNOWN"
            for n in self.nodes
        )
        text = CONF_TEMPLATE.read_text().format(
            root=self.root,
            controller=socket.gethostname(),
            controller_address=self.controller_address,
            ctld_port=self.ctld_port,
            slurmd_port=self.slurmd_port,
            munge_socket=self.munge_socket,
            nodes=node_lines,
            node_names=",".join(n.name for n in self.nodes),
            partition=PARTITION,
            accounting=(
                self.dbd.slurm_conf_lines(self.munge_socket)
                if self.dbd
                else "AccountingStorageType=accounting_storage/none"
            ),
            min_job_age_s=self.min_job_age_s,
            confinement=CGROUP_CONFINEMENT if self.cgroups else NO_CONFINEMENT,
        )
        self.conf.write_text(text)
        if self.cgroups:
            (self.root / "cgroup.conf").write_text(CGROUP_CONF)

    def start(self) -> None:
        began = time.monotonic()
        for sub in ("munge", "ctld", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        os.chmod(self.root / "munge", 0o700)
        if self.dbd is not None:
            self.processes["mariadb-install-db"] = self.dbd.install()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.write_config()
        self._start(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                f"--seed-file={self.root / 'munge' / 'munged.seed'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
            ],
        )
        if not wait_until(self.munge_socket.exists, timeout=10):
            raise RuntimeError(f"munged did not start:\n{self.log('munged')}")
        if self.dbd is not None:
            self._start_accounting()
        self._start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for node in self.nodes:
            self.start_node(node)
        if not wait_until(self.nodes_idle, timeout=30, interval=0.2):
            raise RuntimeError(
                f"Slurm nodes not idle: {self.node_states()}\n{self.log('slurmctld')}"
            )
        self.started_in_s = time.monotonic() - began

    def _start_accounting(self) -> None:
        """The database (its files made while munged started), then slurmdbd."""
        assert self.dbd is not None
        began = time.monotonic()
        self.dbd.wait_installed(self.processes["mariadb-install-db"])
        del self.processes["mariadb-install-db"]
        self._start("mariadbd", self.dbd.server_argv())
        self.dbd.wait_server(self.processes["mariadbd"])
        self.dbd.create_user()
        self.dbd.write_dbd_config(self.root, self.munge_socket)
        self._start("slurmdbd", ["slurmdbd", "-D"])
        if not wait_until(self.dbd.dbd_listening, timeout=30, interval=0.1):
            raise RuntimeError(f"slurmdbd did not start:\n{self.log('slurmdbd')}")
        self.accounting_started_in_s = time.monotonic() - began

    def start_node(self, node: SlurmNode) -> None:
        (self.root / f"spool-{node.name}").mkdir(exist_ok=True)
        argv = ["slurmd", "-D", "-N", node.name, "-f", str(self.conf)]
        if node.netns is not None:
            # nsenter, not `ip netns exec`: that remounts /sys, without the cgroup mounts
            # slurmd needs.
            steps = [f"hostname {node.name}"]
            steps += [f"mount --bind {path} /etc/{path.name}" for path in node.etc]
            command = " && ".join([*steps, f"exec {' '.join(argv)}"])
            argv = [
                "nsenter",
                f"--net=/run/netns/{node.netns}",
                "unshare",
                "--uts",
                "--mount",
                "sh",
                "-c",
                command,
            ]
        self._start(f"slurmd-{node.name}", argv)

    def kill_node(self, name: str) -> None:
        """SIGKILL a node daemon (its jobs' step daemons go on: what a crashed slurmd leaves)."""
        proc = self.processes.pop(f"slurmd-{name}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def resume_node(self, node: SlurmNode, timeout: float = 60) -> None:
        """Start a node's daemon again and wait until the controller takes it back."""
        self.start_node(node)
        self.scontrol("update", f"NodeName={node.name}", "State=RESUME", check=False)
        if not wait_until(self.nodes_idle, timeout=timeout, interval=0.5):
            raise RuntimeError(f"Slurm node {node.name} did not come back: {self.node_states()}")

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - closed by stop()
        env = {**os.environ, **self.env()}
        self.processes[name] = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def sbatch(self, *args: str) -> str:
        """Submit a job of someone else's (`sbatch --parsable ARGS`); its Slurm id."""
        done = subprocess.run(
            ["sbatch", "--parsable", *args],
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            timeout=20,
        )
        if done.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def scancel(self, *args: str) -> None:
        """`scancel ARGS`, as an operator would."""
        done = subprocess.run(
            ["scancel", *args],
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            timeout=20,
        )
        if done.returncode != 0:
            raise RuntimeError(f"scancel {' '.join(args)}: {done.stderr.strip()}")

    def scontrol(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            ["scontrol", *args],
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            timeout=20,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"scontrol {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def job_state(self, slurm_id: str) -> str | None:
        """A job's state as squeue shows it; None once the controller forgot it."""
        done = subprocess.run(
            ["squeue", "-h", "--states=all", f"--jobs={slurm_id}", "-o", "%T"],
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            timeout=20,
        )
        return done.stdout.strip() or None

    def node_states(self) -> dict[str, str]:
        try:
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %T"],
                env={**os.environ, **self.env()},
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
        except subprocess.TimeoutExpired:
            return {}
        return dict(line.split(None, 1) for line in out.splitlines() if " " in line)

    def nodes_idle(self) -> bool:
        states = self.node_states()
        return len(states) == len(self.nodes) and all(
            s in ("idle", "mixed", "allocated") for s in states.values()
        )

    def active_jobs(self) -> list[str]:
        """Jobs the controller has not seen end yet (pending, running or completing)."""
        try:
            out = subprocess.run(
                ["squeue", "-h", "-o", "%i %T"],
                env={**os.environ, **self.env()},
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
        except subprocess.TimeoutExpired:
            return ["?"]
        return out.split()

    def log(self, name: str, lines: int = 40) -> str:
        texts = []
        for path in sorted((self.root / "log").glob(f"{name}*")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            texts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(texts)

    def stop(self) -> None:
        """Cancel every job, then stop the node daemons, the controller and munged, and any
        step daemon a killed slurmd left behind."""
        if "slurmctld" in self.processes:
            subprocess.run(
                ["scancel", f"--partition={PARTITION},{URGENT_PARTITION}", "--full"],
                env={**os.environ, **self.env()},
                capture_output=True,
                timeout=20,
                check=False,
            )
            # Let the step daemons report their ends while the daemons still listen.
            wait_until(lambda: not self.active_jobs(), timeout=15, interval=0.2)
        order = [n for n in self.processes if n.startswith("slurmd-")]
        order += [n for n in ("slurmctld", "slurmdbd", "mariadbd", "munged") if n in self.processes]
        order += [n for n in self.processes if n not in order]  # one a failed start left
        for name in order:
            proc = self.processes.pop(name)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self._kill_step_daemons()
        if self.cgroups:
            self._remove_cgroups()

    def _remove_cgroups(self) -> None:
        """The (empty) cgroups slurmd left under /sys/fs/cgroup/*/slurm_<node>."""
        for node in self.nodes:
            for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{node.name}"):
                for directory in sorted(top.glob("**/"), key=lambda d: -len(d.parts)):
                    try:
                        directory.rmdir()
                    except OSError:
                        continue

    def _kill_step_daemons(self) -> None:
        """slurmstepd processes of this cluster that outlived their slurmd (they clear their
        environment; each keeps its node's log file under our root open)."""
        root = str(self.root)
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] != "slurmstepd":
                continue
            try:
                if any(f.path.startswith(root) for f in proc.open_files()):
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
