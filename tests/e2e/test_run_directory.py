"""`launchbay run -- python train.py --epochs 1` from a directory holding a DDP tutorial's
script, unmodified, against a real stack (API, worker, torchrun with gloo), then
`launchbay artifacts` lists and downloads what it saved."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import torch

from tests.support.procs import job_processes, wait_until
from tests.support.stack import LAUNCHBAY, Stack

PROGRAM = Path(__file__).resolve().parent / "programs" / "ddp_tutorial"


def launchbay(stack: Stack, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAUNCHBAY_API_URL": stack.url, "LAUNCHBAY_TOKEN": stack.admin_token}
    return subprocess.run(
        [LAUNCHBAY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def test_run_packs_the_directory_runs_its_program_and_keeps_its_output(
    sqlite_stack: Stack, tmp_path: Path
) -> None:
    project = tmp_path / "ddp-tutorial"
    shutil.copytree(PROGRAM, project)
    (project / ".gitignore").write_text("data/\n")
    (project / "data").mkdir()
    (project / "data" / "huge.bin").write_bytes(b"\0" * 1024)  # ignored: never uploaded
    (project / "passwd").symlink_to("/etc/passwd")  # not followed

    ran = launchbay(
        sqlite_stack, project, "run", "--nproc-per-node", "2", "--",
        "python", "train.py", "--epochs", "1",
    )  # fmt: skip
    assert ran.returncode == 0, (ran.stdout, ran.stderr, sqlite_stack.worker_logs())
    assert "packed 3 files" in ran.stderr and "left out 'passwd'" in ran.stderr, ran.stderr
    submitted = re.search(r"submitted job (\w+) \(ddp-tutorial-train\)", ran.stderr)
    assert submitted, ran.stderr
    job_id = submitted.group(1)
    assert f"job {job_id} succeeded" in ran.stdout

    with sqlite_stack.client() as http:
        job = http.get(f"/v1/jobs/{job_id}").json()
        logs = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 1000}).json()["items"]
    assert (job["spec"]["nproc_per_node"], job["spec"]["args"]) == (2, ["--epochs", "1"])
    finished = {line["rank"] for line in logs if "Finished running basic DDP" in line["line"]}
    assert finished == {0, 1}

    listed = launchbay(sqlite_stack, tmp_path, "artifacts", job_id)
    assert listed.returncode == 0 and "model.pt" in listed.stdout, listed
    dest = tmp_path / "downloaded"
    fetched = launchbay(sqlite_stack, tmp_path, "artifacts", job_id, "-o", str(dest))
    assert fetched.returncode == 0, fetched.stderr
    state = torch.load(dest / "model.pt", map_location="cpu", weights_only=True)
    assert set(state) == {"net1.weight", "net1.bias", "net2.weight", "net2.bias"}
    refused = launchbay(
        sqlite_stack, tmp_path, "artifacts", job_id, "../../etc/passwd", "-o", str(dest)
    )
    assert refused.returncode == 1 and refused.stderr.startswith("error not_found:"), refused
    assert sorted(p.name for p in tmp_path.rglob("passwd")) == ["passwd"]  # the link only

    assert wait_until(lambda: job_processes(job_id) == [], timeout=10)
