"""A home directory as on a fresh machine's /root: mode 0700, holding a Python of its own.

pyenv's, conda's and uv's Pythons live under a home directory, which other users may not
search, so a root worker's job users cannot reach them (docs/security.md). These tests make
such a home of their own instead of relying on /root's mode: a copy of this session's
interpreter (its binary, and its standard library beside it, where CPython looks first; a
libpython it loads stays where the binary names it) and, when asked, a virtual environment
made from it that imports this session's packages (torch...) and this checkout through a
``.pth`` line, as `worker.environment` does for jobs.

The homes lie under the checkout (`HOMES`), not under /tmp: a root worker gives each job a
/tmp of its own, and a home under the host's /tmp would be reached through that one instead
of through the masks that a home elsewhere (/root) needs (`worker.scratch.masks`).
"""

import errno
import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOMES = ROOT / ".test-homes"
# Not copied into a home: what a job never imports, and the base's own packages.
SKIPPED = {"site-packages", "dist-packages", "test", "__pycache__"}


@dataclass(frozen=True)
class Home:
    root: Path

    @property
    def python(self) -> Path:
        """The interpreter living in the home (as pyenv's ``versions/X/bin/python3.11``)."""
        return self.root / "python" / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"

    @property
    def venv_python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def closed(self) -> Path:
        """The topmost directory above the interpreter that other users may not search: the
        home, unless this checkout itself lies under such a directory (a clone in /root), and
        then that one; what the worker names as reached through the jobs' namespace."""
        for directory in reversed(self.python.parents):
            if not os.stat(directory).st_mode & 0o001:
                return directory
        raise AssertionError(f"{self.root} is searchable by other users")

    def launchbay(self) -> list[str]:
        """The `launchbay` command, run by the home's virtual environment."""
        return [str(self.venv_python), "-m", "client.cli"]


def _link_tree(source: Path, target: Path) -> None:
    """`source` at `target`, its files hard-linked (copied across file systems): no mode of the
    originals is ever changed, so the copy's files are only ever read."""
    for directory, dirs, files in os.walk(source):
        here = target / Path(directory).relative_to(source)
        here.mkdir(parents=True, exist_ok=True)
        dirs[:] = [d for d in dirs if d not in SKIPPED]
        for name in files:
            try:
                os.link(Path(directory) / name, here / name, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM):
                    raise
                shutil.copy2(Path(directory) / name, here / name, follow_symlinks=False)


def copy_interpreter(target: Path) -> Path:
    """This session's interpreter as `target/bin/pythonX.Y`, its standard library in
    `target/lib/pythonX.Y`; the binary is a copy of its own (a test may change its mode)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    binary = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    (target / "bin").mkdir(parents=True)
    shutil.copy2(binary, target / "bin" / version)
    _link_tree(Path(sysconfig.get_paths()["stdlib"]), target / "lib" / version)
    return target / "bin" / version


def make_venv(python: Path, venv: Path) -> None:
    """A venv of `python` that imports this test session's packages and this checkout."""
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    ours = sysconfig.get_paths()["purelib"]
    (site / "_launchbay_tests.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    script = venv / "bin" / "launchbay"  # as pip's console script, for stacks started from it
    script.write_text(f"#!{venv / 'bin' / 'python'}\nfrom client.cli import main\nmain()\n")
    script.chmod(0o755)
    for tool in ("uv", "py-spy"):  # beside the interpreter, where the worker looks for them
        found = Path(sysconfig.get_paths()["scripts"]) / tool
        if found.exists():
            (venv / "bin" / tool).symlink_to(found)


def remove_tree(path: Path) -> None:
    """`rm -rf`: a venv's tens of thousands of files go in a second; shutil.rmtree took 17 s
    here."""
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False)


@contextmanager
def home_with_python(*, venv: bool = True) -> Iterator[Home]:
    """A new 0700 home (module docstring), removed afterwards."""
    HOMES.mkdir(exist_ok=True)
    home = Home(HOMES / uuid.uuid4().hex[:12])
    home.root.mkdir(mode=0o700)
    os.chmod(home.root, 0o700)
    try:
        copy_interpreter(home.root / "python")
        if venv:
            make_venv(home.python, home.root / "venv")
        yield home
    finally:
        remove_tree(home.root)
        try:
            HOMES.rmdir()
        except OSError:
            pass  # another test's home is still there
