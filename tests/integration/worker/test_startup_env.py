"""A job's env cannot make Python or torchrun run anything at start-up: the worker refuses a
stored spec that sets such a name, and the interpreters it starts ignore every PYTHON* variable
even when one is there (`python -I`)."""

import os
import re
import subprocess
import sys
from pathlib import Path

from jobs.spec import JobSpec
from service.db import session_scope
from service.records import create_job
from tests.integration.worker.conftest import WorkerEnv
from tests.unit.test_startup_env import PYTHON_ENV
from worker.launch import RunPaths, build_launch


def hostile_env(tmp_path: Path, pwned: Path) -> dict[str, str]:
    """The published reproduction, and a sitecustomize on PYTHONPATH, each creating `pwned`."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"open({str(pwned)!r}, 'w').write('site')\n")
    return {
        "PYTHONWARNINGS": "ignore::antigravity.Nope",
        "BROWSER": f"/bin/sh -c 'id > {pwned}' %s",
        "PYTHONPATH": str(site),
    }


def test_python_help_env_names_are_all_covered() -> None:
    out = subprocess.run(
        [sys.executable, "--help-env"], capture_output=True, text=True, check=True
    ).stdout
    names = set(re.findall(r"^(PYTHON[A-Z0-9_]*)", out, re.MULTILINE))
    assert names and names <= set(PYTHON_ENV), names - set(PYTHON_ENV)


def test_the_interpreters_the_worker_starts_ignore_python_variables(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    env = {**os.environ, **hostile_env(tmp_path, pwned)}
    # The reproduction works on a plain interpreter: this test can fail.
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, timeout=60)
    assert pwned.exists()
    pwned.unlink()

    script = tmp_path / "ok.py"
    script.write_text("print('ran')\n")
    spec = JobSpec(name="x", code={"code_id": "0" * 64, "entrypoint": "ok.py"})
    paths = RunPaths.for_attempt(tmp_path / "data", "j", 1)
    common = dict(
        job_id="j", attempt=1, paths=paths, resume_from=None, cuda_available=False, port=29500
    )
    torchrun = build_launch(spec, python=sys.executable, base_env={}, **common).argv  # type: ignore[arg-type]
    python = build_launch(
        spec.model_copy(update={"launcher": "python"}),
        python=sys.executable,
        base_env={},
        **common,  # type: ignore[arg-type]
    ).argv
    rank = python[: python.index("--script")] + ["--script", str(script)]
    launcher = [*torchrun[: torchrun.index("-m")], "-c", "import torch.distributed.run"]
    for argv in (launcher, rank):
        subprocess.run(argv, env=env, check=True, timeout=120, cwd=tmp_path)
        assert not pwned.exists(), argv
    assert "ran" in (paths.log_dir / "rank-0.log").read_text()


def test_a_stored_spec_with_the_reproduction_runs_nothing(wenv: WorkerEnv, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    env = hostile_env(tmp_path, pwned)
    spec = JobSpec(name="repro", recipe="synthetic", nproc_per_node=1, env=env)
    with session_scope(wenv.engine) as session:
        job_id = create_job(session, spec).id  # as if the API had let it through
    wenv.job_ids.add(job_id)
    wenv.run(job_id)
    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("failed", "launch_error")
    assert "BROWSER" in (job.message or "") and "PYTHONWARNINGS" in (job.message or "")
    assert not pwned.exists()
