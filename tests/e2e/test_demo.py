"""The README's first command, `scripts/demo.sh`, run for real on a clone of this checkout in
each set-up a newcomer has: root with the clone and the first python3.11 on PATH in a 0700
home (pyenv's under /root); root with the system's Python; an ordinary user. Nothing outside
the clone, its data dir and what Launchbay owns changes mode.

Not a cold install each time: `scripts/setup.sh` installs with uv from its download cache
(the CI keeps it, `UV_CACHE_DIR`, as `.ci/run` says), hard-linked, and the ordinary user's run
reuses the venv of the system Python's clone, as a second run of the demo would."""

import os
import pwd
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.support.homes import ROOT, home_with_python, remove_tree
from tests.support.isolation import PREFIX_ENV, HostSnapshot, reachable_by_job_users
from tests.support.procs import free_port, wait_until
from worker.isolation import can_switch_users, kill_user_processes, user_processes

pytestmark = pytest.mark.skipif(not can_switch_users(), reason="the set-ups run as root first")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_PYTHON = Path("/usr/bin/python3.11")
UV_CACHE = os.environ.get("UV_CACHE_DIR") or str(Path.home() / ".cache" / "launchbay-uv")
# Under the test's own timeout (pytest-timeout's 300 s), so that a demo that hangs is stopped
# by its own cleanup and says where it was.
DEMO_TIMEOUT_S = 200


def clone(target: Path) -> Path:
    """The checkout's tracked files at `target`, as `git clone` leaves them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name, follow_symlinks=False)
    return target


def demo_env(path: str, **more: str) -> dict[str, str]:
    """The test session's environment (its job users' pool, its marker), without what a
    newcomer's shell would not have, on `path`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAUNCHBAY_", "VIRTUAL_ENV", "PYTHON"))
        or k in (PREFIX_ENV, "LAUNCHBAY_JOB_USER_LEASE_DIR", "LAUNCHBAY_JOB_PASS_ENV")
        or k.startswith("LAUNCHBAY_TEST")
    }
    env.update(PATH=path, UV_CACHE_DIR=UV_CACHE, LAUNCHBAY_DEMO_PORT=str(free_port()), **more)
    return env


def run_demo(clone_dir: Path, env: dict[str, str], user: int | None = None) -> str:
    """What `scripts/demo.sh` said; one that runs past DEMO_TIMEOUT_S is stopped as Ctrl-C
    would stop it (its own cleanup stops what it started), and fails with what it said."""
    demo = subprocess.Popen(
        ["scripts/demo.sh"],
        cwd=clone_dir,
        env=env,
        user=user,
        group=None if user is None else pwd.getpwuid(user).pw_gid,
        extra_groups=None if user is None else [],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        said, _ = demo.communicate(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            said, _ = demo.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            said, _ = demo.communicate()
        logs = "".join(
            f"\n--- {log.name}\n{log.read_text(errors='replace')[-4000:]}"
            for log in sorted((clone_dir / ".launchbay" / "demo").glob("*.log"))
        )
        pytest.fail(f"the demo ran past {DEMO_TIMEOUT_S} s; it said:\n{said[-4000:]}{logs}")
    assert demo.returncode == 0, said[-6000:]
    assert "succeeded (completed)" in said, said[-3000:]
    assert "saved digits-best.pt (sha256 verified)" in said
    assert (clone_dir / "digits-best.pt").is_file()
    return said


def test_as_root_with_the_clone_and_python_in_a_0700_home(tmp_path: Path) -> None:
    """pyenv's Python first on PATH and the clone both in /root, 0700: the worker reaches the
    interpreter through its jobs' namespace, and the data goes where job users reach it."""
    data = reachable_by_job_users(tmp_path / "demo-data")
    shutil.rmtree(data)  # the demo makes it
    with home_with_python(venv=False) as home:
        watched = (home.root, *home.root.parents)
        before = HostSnapshot.take(None, watched)  # modes; the session removes its users
        repo = clone(home.root / "launchbay")
        path = f"{home.python.parent}:{SYSTEM_PATH}"
        said = run_demo(repo, demo_env(path, LAUNCHBAY_DEMO_DATA_DIR=str(data)))
        closed = home.closed
        assert os.path.realpath(repo / ".venv/bin/python") == str(home.python)
        assert before.changes(HostSnapshot.take(None, watched)) == []
    flat = " ".join(said.split())
    assert f"demo: the data goes to {data}, not into this clone: the job's user could not " in flat
    assert f"reach it there ({closed} is not searchable by other users, mode 0700)" in flat
    worker_log = " ".join((data / "demo" / "worker.log").read_text().split())
    assert f"under {closed} through their own mount namespace only" in worker_log
    # The last lines: what stays, and how to remove it (the session's pool: the users other
    # tests running beside this one made are named too).
    last = said.rstrip().splitlines()[-4:]
    users = re.escape(os.environ[PREFIX_ENV]) + r"\d+"
    lease_dir = re.escape(os.environ["LAUNCHBAY_JOB_USER_LEASE_DIR"])
    assert re.fullmatch(rf"demo:   run: {users}(, {users})*, and {lease_dir}", last[1]), last
    assert last[:1] + last[2:] == [
        "demo: as root, the worker ran the job as a system user it made; these stay for the next",
        "demo:   remove them with: .venv/bin/launchbay worker --remove-job-users",
        f"demo:   the demo's data stays in {data} (rm -rf it when done)",
    ]


@pytest.fixture(scope="module")
def system_clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A clone whose venv is made from the system's Python, for both of its set-ups."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"needs the system's {SYSTEM_PYTHON}")
    root = reachable_by_job_users(tmp_path_factory.mktemp("system") / "launchbay")
    yield clone(root)
    remove_tree(root)


def test_as_root_with_the_system_python(system_clone: Path) -> None:
    said = run_demo(system_clone, demo_env(SYSTEM_PATH))
    assert os.path.realpath(system_clone / ".venv/bin/python") == os.path.realpath(SYSTEM_PYTHON)
    assert (system_clone / ".launchbay" / "launchbay.db").is_file()  # the clone's own data dir
    # What running needs, not the development lock (scripts/test.sh adds that).
    assert (system_clone / ".venv" / ".launchbay-installed").read_text().endswith(" run\n")
    for tool in ("pytest", "ruff", "mypy", "moto_server"):
        assert not (system_clone / ".venv" / "bin" / tool).exists(), tool
    assert (system_clone / ".venv" / "bin" / "uv").exists()
    assert "demo: as root, the worker ran the job as a system user it made" in said
    assert "not root" not in said


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path


@pytest.fixture
def ordinary_user(tmp_path: Path) -> Iterator[User]:
    """A user of the test's own (named like the session's job users, so the session would
    notice it left), with a home of its own; removed afterwards."""
    name = f"{os.environ[PREFIX_ENV]}demo"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    entry = pwd.getpwnam(name)
    try:
        home = reachable_by_job_users(tmp_path / "home")
        os.chown(home, entry.pw_uid, entry.pw_gid)
        yield User(name, entry.pw_uid, entry.pw_gid, home)
    finally:
        left = [described(pid) for pid in user_processes(entry.pw_uid)]
        # What a failed run left (its Redis, say): userdel refuses while it runs.
        kill_user_processes(entry.pw_uid)
        # Its processes that ended are zombies until PID 1 reaps them; userdel counts them.
        wait_until(lambda: not user_processes(entry.pw_uid, zombies=True), timeout=60)
        subprocess.run(["userdel", name], check=True)
        assert not left, f"the demo left processes of {name}: {left}"


def described(pid: int) -> str:
    try:
        return f"{pid}: {psutil.Process(pid).cmdline()}"
    except psutil.Error:
        return f"{pid} (gone)"


def test_as_an_ordinary_user_who_is_told_what_isolation_it_gives_up(
    system_clone: Path, ordinary_user: User
) -> None:
    """The user's own clone; its venv the system Python's, made once (the set-up above)."""
    if not (system_clone / ".venv" / ".launchbay-installed").exists():
        subprocess.run(["scripts/setup.sh"], cwd=system_clone, env=demo_env(SYSTEM_PATH))
    for left in (system_clone / ".launchbay", system_clone / "digits-best.pt"):
        shutil.rmtree(left) if left.is_dir() else left.unlink(missing_ok=True)
    os.chown(system_clone, ordinary_user.uid, ordinary_user.gid)
    env = demo_env(SYSTEM_PATH, HOME=str(ordinary_user.home), USER=ordinary_user.name)
    said = run_demo(system_clone, env, user=ordinary_user.uid)
    told = [line for line in said.splitlines() if "not root" in line]
    assert told == [
        f"demo: not root, so the job runs as you ({ordinary_user.name}), not as a user of its "
        "own: it could read"
    ]
    assert (system_clone / ".launchbay").stat().st_uid == ordinary_user.uid
    assert "remove them with" not in said
