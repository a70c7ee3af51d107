"""The kit a GPU check takes to a GPU host that reaches no package registry (stdlib only: the
host's own Python runs `install`).

`prepare` (here, with the registries in reach): the wheels of requirements.lock for the host's
Python, less what its image already has (torch and the scientific stack, HOST_PROVIDED), plus
setuptools to build Launchbay there; and Debian's redis-server with the libraries it links
against, unpacked. All under `gpu-check-kit/` (ignored), which travels with the repository.

`install` (on the GPU host): a virtual environment in a directory job users can reach, made
from the host's interpreter, that sees the host's own packages (its torch) through a .pth file
after its own, with the kit's wheels and Launchbay installed into it from the kit alone.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What the GPU image brings (a CUDA build of torch, and the packages built against its numpy);
# the kit leaves them out and the check uses the host's.
HOST_PROVIDED = frozenset({"numpy", "scipy", "scikit-learn", "joblib", "threadpoolctl", "uv"})
SETUPTOOLS = "setuptools==80.9.0"  # builds Launchbay's own wheel on the host (>=68 wanted)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64")  # fmt: skip
# Debian's packages of redis-server and the libraries it links that a bare image may lack.
REDIS_PACKAGES = ("redis-tools", "redis-server", "libjemalloc2", "liblzf1", "libatomic1")
# The most the kit and the tracked files may weigh together (the host copy's limit is 64 MiB).
MAX_COPY_BYTES = 60 * 2**20


def kit_requirements(lock: str) -> list[str]:
    """The lock's `name==version` lines, less HOST_PROVIDED."""
    wanted = []
    for line in lock.splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
        if match and canonical(match.group(1)) not in HOST_PROVIDED:
            wanted.append(f"{match.group(1)}=={match.group(2)}")
    return wanted


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def download_wheels(folder: Path, python_version: str) -> None:
    requirements = folder / "requirements.txt"
    lock = (REPO / "requirements.lock").read_text()
    requirements.write_text("\n".join([*kit_requirements(lock), SETUPTOOLS]) + "\n")
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--only-binary=:all:", "--implementation", "cp", "--python-version",
         python_version, *platforms, "--dest", str(folder / "wheels"), "-r", str(requirements)],
        check=True,
    )  # fmt: skip


def unpack_redis(folder: Path) -> None:
    """Debian's redis-server (a link to redis-check-rdb, which acts by its name) in bin/, the
    libraries it needs in lib/."""
    with tempfile.TemporaryDirectory() as scratch:
        debs = Path(scratch)
        if subprocess.run(["apt-get", "download", *REDIS_PACKAGES], cwd=debs).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(["apt-get", "download", *REDIS_PACKAGES], cwd=debs, check=True)
        tree = debs / "tree"
        for deb in debs.glob("*.deb"):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
        (folder / "bin").mkdir(parents=True)
        (folder / "lib").mkdir()
        for name in ("redis-check-rdb", "redis-cli"):
            shutil.copy2(tree / "usr" / "bin" / name, folder / "bin" / name)
        (folder / "bin" / "redis-server").symlink_to("redis-check-rdb")
        for library in (tree / "usr" / "lib" / "x86_64-linux-gnu").glob("*.so.*"):
            shutil.copy2(library, folder / "lib" / library.name, follow_symlinks=True)


def tracked_bytes() -> int:
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    return sum(
        (REPO / f.decode()).stat().st_size for f in files if f and (REPO / f.decode()).is_file()
    )


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def prepare(kit: Path, python_version: str) -> None:
    fresh = kit.with_name(kit.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    download_wheels(fresh, python_version)
    unpack_redis(fresh / "redis")
    (fresh / "python-version").write_text(python_version + "\n")
    size, repo = folder_bytes(fresh), tracked_bytes()
    if size + repo > MAX_COPY_BYTES:
        raise SystemExit(
            f"gpu-check: the kit ({size / 2**20:.1f} MiB) and the repository "
            f"({repo / 2**20:.1f} MiB) weigh more than {MAX_COPY_BYTES / 2**20:.0f} MiB"
        )
    shutil.rmtree(kit, ignore_errors=True)
    fresh.rename(kit)
    wheels = len(list((kit / "wheels").glob("*.whl")))
    total = (size + repo) / 2**20
    print(f"gpu-check: kit ready in {kit}: {wheels} wheels and redis-server, "
          f"{size / 2**20:.1f} MiB (with the repository {total:.1f} MiB)")  # fmt: skip


def install(kit: Path, interpreter: str, venv: Path) -> None:
    """The check's environment at `venv` (see the module's docstring)."""
    want = (kit / "python-version").read_text().strip()
    have = subprocess.run(
        [interpreter, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if have != want:
        raise SystemExit(
            f"gpu-check: {interpreter} is Python {have}, the kit is for {want} "
            f"(scripts/gpu-check.sh --prepare --python-version {have})"
        )
    host_sites = subprocess.run(
        [interpreter, "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    subprocess.run([interpreter, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_dir = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", purelib],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site_dir / "zz-host-packages.pth").write_text("\n".join(host_sites) + "\n")
    # The host's pip, installing into the new environment (it has no pip of its own).
    pip = [interpreter, "-m", "pip", "--python", str(venv / "bin" / "python")]
    pip += ["--disable-pip-version-check", "-q"]
    options = ["--no-index", "--no-deps", "--no-compile", "--ignore-installed"]
    wheels = sorted(str(w) for w in (kit / "wheels").glob("*.whl"))
    subprocess.run([*pip, "install", *options, *wheels], check=True)
    subprocess.run([*pip, "install", *options, "--no-build-isolation", str(REPO)], check=True)
    os.chmod(venv, 0o755)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check.kit", description=__doc__)
    parser.add_argument("action", choices=("prepare", "install"))
    parser.add_argument("--kit", type=Path, default=REPO / "gpu-check-kit")
    parser.add_argument("--python-version", default="3.12", help="prepare: the host's Python")
    parser.add_argument("--interpreter", help="install: the host's Python with its torch")
    parser.add_argument("--venv", type=Path, help="install: where the environment goes")
    args = parser.parse_args(argv)
    if args.action == "prepare":
        prepare(args.kit.resolve(), args.python_version)
    else:
        if not (args.interpreter and args.venv):
            parser.error("install needs --interpreter and --venv")
        install(args.kit.resolve(), args.interpreter, args.venv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
