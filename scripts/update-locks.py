"""Rewrite requirements.lock (runtime) and requirements-dev.lock (tools) from the packages
installed in the running environment, following pyproject.toml's dependency lists.

Run with the project's venv after installing or upgrading a dependency:
    .venv/bin/python scripts/update-locks.py
torch is left out on purpose: it is installed first and explicitly (CPU or CUDA build).
"""

import re
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
NOT_LOCKED = {"torch"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_closure(requirements: list[str]) -> dict[str, str]:
    """name -> "Name==version" for the requirements and everything they need, as installed."""
    pinned: dict[str, str] = {}
    pending = [Requirement(r) for r in requirements]
    while pending:
        req = pending.pop()
        name = normalise(req.name)
        if name in pinned or name in NOT_LOCKED:
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            continue
        pinned[name] = f"{dist.metadata['Name']}=={dist.version}"
        extras = set(req.extras) or {""}
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                pending.append(sub)
    return pinned


def write(path: Path, title: str, pins: dict[str, str]) -> None:
    lines = sorted(pins.values(), key=str.lower)
    path.write_text(f"# {title}\n" + "\n".join(lines) + "\n")
    print(f"{path.name}: {len(lines)} packages")


def main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = installed_closure(project["dependencies"])
    tools = installed_closure(project["optional-dependencies"]["dev"])
    write(
        ROOT / "requirements.lock",
        "Runtime dependencies, pinned (torch is installed separately, first).",
        runtime,
    )
    write(
        ROOT / "requirements-dev.lock",
        "Test and lint tools, pinned; installed on top of requirements.lock.",
        {k: v for k, v in tools.items() if k not in runtime},
    )


if __name__ == "__main__":
    main()
