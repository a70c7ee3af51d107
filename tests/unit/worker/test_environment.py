"""A job's requirements as checked at submission and on the worker, and the environment
cache's eviction (fake environments: directories with a `.complete` file)."""

import fcntl
import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from jobs.environment import EnvironmentSpec, check_requirement
from jobs.spec import JobSpec
from worker.environment import (
    EnvironmentCache,
    EnvironmentProblem,
    Sources,
    check_torch,
    failing_package,
    job_requirements,
    parse_requirements_file,
)

HOSTILE = [
    "--index-url=https://evil.example/simple",
    "--extra-index-url https://evil.example/simple",
    "-e .",
    "-r /etc/passwd",
    "-c constraints.txt",
    "--find-links=/root",
    "./local/package",
    "/etc/passwd",
    "pkg @ file:///etc/passwd",
    "pkg @ http://plain.example/pkg.whl",
    "pkg\n--index-url=https://evil.example",
    "pkg --hash=sha256:00",
    "",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_options_paths_and_other_urls_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        check_requirement(text)
    with pytest.raises(ValidationError):
        EnvironmentSpec(requirements=[text])


def test_requirements_are_kept_normalized() -> None:
    assert check_requirement(" tomli-w>=1.0 ") == "tomli-w>=1.0"
    assert check_requirement('rich[jupyter]==13.0; python_version >= "3.8"') == (
        'rich[jupyter]==13.0; python_version >= "3.8"'
    )
    assert check_requirement("pkg @ https://example.org/pkg-1.0-py3-none-any.whl")


def test_a_requirements_file_outside_the_code_is_refused_by_the_spec() -> None:
    code = {"code_id": "0" * 64}
    for name in ("../secrets.txt", "/etc/passwd", "a/../../b"):
        with pytest.raises(ValidationError):
            JobSpec.model_validate(
                {"name": "n", "code": code, "environment": {"requirements_file": name}}
            )
    with pytest.raises(ValidationError, match="needs uploaded code"):
        JobSpec.model_validate(
            {"name": "n", "recipe": "synthetic", "environment": {"requirements_file": "r.txt"}}
        )


def test_a_requirements_file_names_its_bad_line() -> None:
    text = "# pinned\ntomli-w==1.2.0  # for configs\n\n--index-url https://evil.example\n"
    with pytest.raises(EnvironmentProblem, match=r"requirements.txt, line 4: .*options"):
        parse_requirements_file(text, "requirements.txt")
    assert parse_requirements_file("# x\ntomli-w==1.2.0  # y\n\n", "r.txt") == ["tomli-w==1.2.0"]


def test_the_code_s_requirements_txt_is_used_unless_the_spec_names_its_own(
    tmp_path: Path,
) -> None:
    (tmp_path / "requirements.txt").write_text("tomli-w\n")
    (tmp_path / "other.txt").write_text("humanize\n")
    assert job_requirements([], None, tmp_path) == ["tomli-w"]
    assert job_requirements(["rich"], None, tmp_path) == ["rich"]
    assert job_requirements([], "other.txt", tmp_path) == ["humanize"]
    assert job_requirements([], None, None) == []
    (tmp_path / "link.txt").symlink_to("/etc/hostname")
    with pytest.raises(EnvironmentProblem, match="not a file in the code"):
        job_requirements([], "link.txt", tmp_path)


def test_a_requirement_that_would_replace_torch_names_it() -> None:
    check_torch(["torch>=2", "numpy", 'torch==1.0; extra == "old"'], "2.13.0+cpu", "the job")
    with pytest.raises(EnvironmentProblem, match=r"'torch==1.0'.*torch is 2.13.0"):
        check_torch(["numpy", "torch==1.0"], "2.13.0+cpu", "the job")
    with pytest.raises(EnvironmentProblem, match="torchvision"):
        check_torch(["torch==2.0.0"], "2.13.0", "torchvision (installed for the job)")


def test_uv_s_error_names_the_package() -> None:
    lines = [
        "error: No solution found when resolving dependencies",
        "  cause: Because launchbay-missing was not found in the package registry and you ...",
    ]
    assert failing_package(lines) == "launchbay-missing"


def _fake_env(root: Path, key: str, size: int, age: float) -> None:
    (root / key).mkdir(parents=True)
    marker = root / key / ".complete"
    marker.write_text(json.dumps({"size": size}))
    os.utime(marker, (age, age))


def test_eviction_removes_the_least_recently_used_that_no_job_holds(tmp_path: Path) -> None:
    for key, age in (("old", 100.0), ("held", 200.0), ("mid", 300.0), ("new", 400.0)):
        _fake_env(tmp_path, key, 10, age)
    cache = EnvironmentCache(tmp_path, max_bytes=20, sources=Sources())
    with open(tmp_path / "held.use", "ab") as use:
        fcntl.flock(use, fcntl.LOCK_SH)  # a running job's hold
        assert cache.evict(keep="new") == ["old", "mid"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["held", "new"]


def test_sources_become_uv_options() -> None:
    assert Sources().uv_args() == ["--no-build"], "wheels only: no build code on the worker"
    assert Sources(allow_builds=True).uv_args() == []
    assert Sources("none", ("/wheels",)).uv_args() == ["--no-build", "--no-index"]
    assert Sources("none", ("/wheels",)).uv_env() == {"UV_FIND_LINKS": "/wheels"}
    assert Sources().uv_env() == {}


def test_package_sources_reach_uv_through_its_environment_never_its_command_line() -> None:
    """A command line is readable by every local user (/proc/<pid>/cmdline), and an index URL
    may hold a password."""
    index, wheels = "https://ci:hunter2@pypi.example/simple", "https://ci:hunter2@wheels.example/"
    sources = Sources(index, (wheels, "/wheels"), allow_builds=True)
    assert "hunter2" not in " ".join(sources.uv_args())
    assert sources.uv_env() == {"UV_DEFAULT_INDEX": index, "UV_FIND_LINKS": f"{wheels},/wheels"}
