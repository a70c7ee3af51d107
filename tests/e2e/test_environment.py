"""A job's own Python environment, built by a real worker with real uv from a wheelhouse
(`--find-links`, no index: no network needed): a package the worker lacks is installed for the
job and cached for the next; a requirement that cannot be met, and one that would replace
torch, fail the job `environment_error` naming the package, and the worker serves the next."""

import io
import re
import tarfile
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import stack_of_its_own
from tests.support.procs import job_processes, wait_until
from tests.support.stack import Stack
from tests.support.wheels import build_wheel

TRAIN = b"""
import os
import launchbay_probe
print("probe says", launchbay_probe.hello(), "rank", os.environ.get("RANK"))
with open(os.path.join(os.environ["LAUNCHBAY_OUTPUT_DIR"], "probe.txt"), "w") as out:
    out.write(launchbay_probe.hello())
"""


def archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def upload(http: httpx.Client, content: bytes) -> str:
    files = {"file": ("code.tar.gz", content, "application/gzip")}
    response = http.post("/v1/code", files=files)
    assert response.status_code == 201, response.text
    code_id: str = response.json()["code_id"]
    return code_id


def logs(http: httpx.Client, job_id: str) -> str:
    items = http.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0, "limit": 10_000})
    return "\n".join(item["line"] for item in items.json()["items"])


def run(stack: Stack, http: httpx.Client, spec: dict[str, Any], states: set[str]) -> Any:
    response = http.post("/v1/jobs", json={"device": "cpu", "nproc_per_node": 1, **spec})
    assert response.status_code == 201, response.text
    return stack.wait_for_state(http, response.json()["id"], states, timeout=180)


def test_a_job_s_requirements_are_installed_cached_and_checked(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "launchbay-probe", "1.0", "def hello():\n    return 'hello'\n")
    settings = {
        "LAUNCHBAY_PIP_INDEX_URL": "none",
        "LAUNCHBAY_PIP_FIND_LINKS": str(wheels),
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
    }
    with stack_of_its_own(tmp_path, **settings) as stack, stack.client() as http:
        code = archive({"train.py": TRAIN, "requirements.txt": b"launchbay-probe==1.0\n"})
        code_id = upload(http, code)
        first = run(stack, http, {"name": "env-first", "code": {"code_id": code_id}}, {"succeeded"})
        text = logs(http, first["id"])
        assert "probe says hello rank 0" in text
        assert re.search(r"\[environment\] ready in [\d.]+ s \(built", text), text
        assert "launchbay-probe==1.0" in text, "uv's own output is in the job's logs"
        # It printed and wrote a file of its own: kept as an artifact, and the job says that
        # it reported nothing.
        assert "reported no metric and no checkpoint" in first["message"]
        artifacts = http.get(f"/v1/jobs/{first['id']}/artifacts").json()["items"]
        assert [(a["path"], a["size"]) for a in artifacts] == [("probe.txt", 5)]
        probe = http.get(f"/v1/jobs/{first['id']}/artifacts/probe.txt")
        assert probe.content == b"hello"

        missing = run(
            stack,
            http,
            {
                "name": "env-missing",
                "code": {"code_id": code_id},
                "environment": {"requirements": ["launchbay-not-in-the-wheelhouse"]},
            },
            {"failed"},
        )
        assert missing["exit_reason"] == "environment_error"
        assert missing["attempt"] == 1, "not retried"
        assert "launchbay-not-in-the-wheelhouse" in missing["message"]
        assert "[environment] failed" in logs(http, missing["id"])

        torch_pin = run(
            stack,
            http,
            {
                "name": "env-torch",
                "code": {"code_id": code_id},
                "environment": {"requirements": ["launchbay-probe", "torch==1.0"]},
                "max_retries": 2,
            },
            {"failed"},
        )
        assert torch_pin["exit_reason"] == "environment_error"
        assert torch_pin["attempt"] == 1, "not retried"
        assert "'torch==1.0'" in torch_pin["message"]

        # The worker serves the next job, from the cache, under the other launcher.
        second = run(
            stack,
            http,
            {
                "name": "env-second",
                "code": {"code_id": code_id},
                "launcher": "python",
            },
            {"succeeded"},
        )
        text = logs(http, second["id"])
        assert "probe says hello" in text
        assert re.search(r"\[environment\] ready in [\d.]+ s \(cached", text), text
        assert len(list((stack.data_dir / "envs").glob("*/.complete"))) == 1
    for job in (first, second):
        assert wait_until(lambda job=job: job_processes(job["id"]) == [], timeout=10)
