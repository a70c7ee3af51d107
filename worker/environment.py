"""A job's own Python environment: the packages its spec's `environment` (or a
`requirements.txt` at the root of its uploaded code) asks for, installed with `uv` into a venv
layered on the worker's own interpreter and packages.

The venv sees the worker's site-packages after its own (a `.pth` file that runs
`site.addsitedir` on each of them), so torch (a CUDA build on GPU nodes) is reused: it is
excluded from every resolution (`--excludes`), never downloaded and never replaced. A
requirement on torch that the worker's torch does not satisfy fails the build, naming the
package (`check_torch`, before the install for the job's own requirements and after it for
what they pulled in).

Environments are cached by content under ``<data dir>/envs/<key>/``: the key hashes the
requirements, the interpreter, the torch version, uv's version and the package sources. One is
built once, under a file lock, however many jobs ask at the same time; it is complete when its
``.complete`` file exists. A job holds a shared lock on ``<key>.use`` while it runs; the cache
is kept within `LAUNCHBAY_ENV_CACHE_BYTES` by removing the least recently used environments
that no job is using.

The installer's output goes, line by line, to `on_output` (the attempt stores it as rank 0's
log lines) and to ``logs/environment.log``; a failed build raises `EnvironmentProblem` with the
installer's last lines.
"""

import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from jobs.environment import MAX_REQUIREMENTS, check_requirement

REQUIREMENTS_TXT = "requirements.txt"
LAST_LINES = 15
PROTECTED = "torch"  # never installed into a job's environment: the worker's is used


class EnvironmentProblem(Exception):
    """The job's environment cannot be built; the message says why, for the job's user."""


def parse_requirements_file(text: str, source: str) -> list[str]:
    """The requirements of a requirements file (comments and blank lines skipped), each checked
    by `check_requirement`; EnvironmentProblem naming the line otherwise."""
    found: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        try:
            found.append(check_requirement(line))
        except ValueError as exc:
            raise EnvironmentProblem(f"{source}, line {number}: {exc}") from None
    return found


def job_requirements(
    requirements: Sequence[str], requirements_file: str | None, code_dir: Path | None
) -> list[str]:
    """What a job asks for: the spec's requirements, plus its requirements file (a path inside
    the uploaded code); without either, the code's top-level requirements.txt if it has one."""
    found = [check_requirement(r) for r in requirements]
    name = requirements_file
    if name is None and not requirements and code_dir is not None:
        if (code_dir / REQUIREMENTS_TXT).is_file():
            name = REQUIREMENTS_TXT
    if name is not None:
        if code_dir is None:
            raise EnvironmentProblem("requirements_file needs uploaded code")
        path = (code_dir / name).resolve()
        if not path.is_relative_to(code_dir.resolve()) or not path.is_file():
            raise EnvironmentProblem(f"requirements_file {name!r} is not a file in the code")
        found += parse_requirements_file(path.read_text(errors="replace"), name)
    if len(found) > MAX_REQUIREMENTS:
        raise EnvironmentProblem(f"at most {MAX_REQUIREMENTS} requirements, not {len(found)}")
    return list(dict.fromkeys(found))


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_torch(requirements: Iterable[str], torch_version: str | None, who: str) -> None:
    """EnvironmentProblem when a requirement on torch is not met by the worker's torch."""
    if torch_version is None:
        return
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != PROTECTED:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if not requirement.specifier.contains(torch_version, prereleases=True):
            raise EnvironmentProblem(
                f"{who} requires {text!r}, but this worker's torch is {torch_version}; a job's "
                "environment never replaces torch: drop the pin, or run the job on workers "
                "with that torch"
            )


@dataclass(frozen=True)
class Sources:
    """Where packages come from: the worker's settings."""

    index_url: str | None = None  # None: uv's default (PyPI); "none": no index at all
    find_links: tuple[str, ...] = ()
    # Building a source distribution runs its code on the worker, as the worker: wheels only
    # unless the worker's settings allow builds.
    allow_builds: bool = False

    def uv_args(self) -> list[str]:
        """uv's options; never a URL, which may hold a password (see `uv_env`)."""
        args: list[str] = [] if self.allow_builds else ["--no-build"]
        if self.index_url == "none":
            args.append("--no-index")
        return args

    def uv_env(self) -> dict[str, str]:
        """The index and wheelhouses, for uv's environment: a command line is there for every
        local user to read (``/proc/<pid>/cmdline``), an environment only for uv's own uid."""
        env = {}
        if self.index_url and self.index_url != "none":
            env["UV_DEFAULT_INDEX"] = self.index_url
        if self.find_links:
            env["UV_FIND_LINKS"] = ",".join(self.find_links)
        return env


@dataclass(frozen=True)
class Environment:
    """A built environment: its interpreter, and how it came to be ready."""

    key: str
    root: Path
    python: Path
    seconds: float
    cached: bool
    size: int


def uv_binary() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def uv_version(uv: str) -> str:
    return subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout


def environment_key(requirements: Sequence[str], sources: Sources, uv_ver: str) -> str:
    facts = {
        "requirements": sorted(requirements),
        "python": os.path.realpath(sys.executable),
        "version": sys.version,
        "torch": installed_version("torch"),
        "uv": uv_ver.strip(),
        "index": sources.index_url,
        "find_links": list(sources.find_links),
    }
    raw = json.dumps(facts, sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def worker_site_dirs() -> list[str]:
    """The worker's own site-packages (a venv's, or the system's), in import order."""
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    dirs += [p for p in sys.path if p.endswith("site-packages") or p.endswith("dist-packages")]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def dir_size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


# The environments this process uses (shared locks), held until `release_environments`.
_HELD: list[IO[bytes]] = []


def release_environments() -> None:
    while _HELD:
        _HELD.pop().close()


class EnvironmentCache:
    """The worker's cache of job environments (see the module docstring)."""

    def __init__(self, root: Path, max_bytes: int, sources: Sources) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.sources = sources

    def prepare(self, requirements: Sequence[str], on_output: Callable[[str], None]) -> Environment:
        """The environment for `requirements`, built unless cached; the caller holds it (a
        shared lock) until `release_environments` or the end of its process."""
        check_torch(requirements, installed_version(PROTECTED), "the job")
        started = time.monotonic()
        uv = uv_binary()
        key = environment_key(requirements, self.sources, uv_version(uv))
        self.root.mkdir(parents=True, exist_ok=True)
        env_dir = self.root / key
        self._hold(key)
        cached = True
        with open(self.root / f"{key}.lock", "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build; the others wait for it
            if not (env_dir / ".complete").is_file():
                cached = False
                shutil.rmtree(env_dir, ignore_errors=True)  # a build that died half-way
                try:
                    self._build(uv, env_dir, requirements, on_output)
                except BaseException:
                    shutil.rmtree(env_dir, ignore_errors=True)
                    raise
                size = dir_size(env_dir)
                (env_dir / ".complete").write_text(json.dumps({"size": size}))
        info = json.loads((env_dir / ".complete").read_text())
        os.utime(env_dir / ".complete")  # least recently used: its mtime
        seconds = time.monotonic() - started
        if not cached:
            self.evict(keep=key)
        return Environment(
            key, env_dir, env_dir / "bin" / "python", seconds, cached, int(info["size"])
        )

    def _hold(self, key: str) -> None:
        handle = open(self.root / f"{key}.use", "ab")  # noqa: SIM115 (held until release)
        fcntl.flock(handle, fcntl.LOCK_SH)
        _HELD.append(handle)

    def _build(
        self, uv: str, env_dir: Path, requirements: Sequence[str], on_output: Callable[[str], None]
    ) -> None:
        run_uv(
            [uv, "venv", "--no-config", "--quiet", "--python", sys.executable, str(env_dir)],
            self.root,
            on_output,
        )
        (env_dir / "requirements.in").write_text("".join(f"{r}\n" for r in requirements))
        (env_dir / "excludes.txt").write_text(f"{PROTECTED}\n")
        python = env_dir / "bin" / "python"
        site_dir = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in worker_site_dirs())
        (Path(site_dir) / "_launchbay_worker.pth").write_text(lines)
        if requirements:
            run_uv(
                [
                    uv,
                    "pip",
                    "install",
                    "--no-config",
                    "--python",
                    str(python),
                    "--excludes",
                    str(env_dir / "excludes.txt"),
                    *self.sources.uv_args(),
                    "-r",
                    str(env_dir / "requirements.in"),
                ],
                env_dir,
                on_output,
                self.sources.uv_env(),
            )
        pulled = subprocess.run(
            [str(python), "-c", REQUIRES_SCRIPT, site_dir],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for line in pulled.splitlines():
            who, _, text = line.partition("\t")
            check_torch([text], installed_version(PROTECTED), f"{who} (installed for the job)")

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove the least recently used complete environments that no job holds until the
        cache is within its limit; the keys removed."""
        entries = []
        for marker in self.root.glob("*/.complete"):
            try:
                size = int(json.loads(marker.read_text())["size"])
                entries.append((marker.stat().st_mtime, marker.parent.name, size))
            except (OSError, ValueError, KeyError):
                continue
        total = sum(size for _, _, size in entries)
        removed: list[str] = []
        for _, key, size in sorted(entries):
            if total <= self.max_bytes:
                break
            if key == keep:
                continue
            with open(self.root / f"{key}.use", "ab") as use:
                try:
                    fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a job runs in it
                with open(self.root / f"{key}.lock", "ab") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    (self.root / key / ".complete").unlink(missing_ok=True)
                    shutil.rmtree(self.root / key, ignore_errors=True)
            total -= size
            removed.append(key)
        return removed


# Run by the environment's interpreter: the requirements of what was installed into it
# ("<distribution>\t<requirement>" lines).
REQUIRES_SCRIPT = """
import sys, importlib.metadata as md
for dist in md.distributions(path=[sys.argv[1]]):
    for req in dist.requires or ():
        print(dist.metadata["Name"] + "\\t" + req)
"""


def run_uv(
    argv: list[str],
    cwd: Path,
    on_output: Callable[[str], None],
    sources: Mapping[str, str] | None = None,
) -> None:
    """Run uv (with `sources`, `Sources.uv_env`, in its environment), its output (stdout and
    stderr) line by line to `on_output`; EnvironmentProblem with its last lines when it
    fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAUNCHBAY_", "PIP_"))}
    env.update(sources or {})
    env.update(NO_COLOR="1", UV_NO_PROGRESS="1", VIRTUAL_ENV="")
    env.pop("VIRTUAL_ENV")
    last: list[str] = []
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.rstrip("\n")
        last = [*last[-(LAST_LINES - 1) :], line]
        on_output(line)
    if process.wait() != 0:
        named = failing_package(last)
        head = f"installing {named} failed" if named else "the environment could not be built"
        raise EnvironmentProblem(f"{head} (uv exited {process.returncode}):\n" + "\n".join(last))


def failing_package(lines: Sequence[str]) -> str | None:
    """The package uv's error names, if any ("Because foo was not found...")."""
    for line in lines:
        match = re.search(r"(?:Because|no version of|not found)\W+([A-Za-z0-9][\w.\-]*)", line)
        if match and match.group(1) not in {"you", "there", "only", "all", "the"}:
            return match.group(1)
    return None
