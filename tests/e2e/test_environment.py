"""A job's own Python environment, built by a real worker with real uv from a private index
of the test's own (on loopback, behind a password; no network needed): a package the worker
lacks is installed for the job and cached for the next; a requirement that cannot be met, and
one that would replace torch, fail the job `environment_error` naming the package, and the
worker serves the next. Nothing of the worker's secrets reaches a rank, nor a command line
that other users read while uv builds."""

import io
import json
import os
import re
import secrets
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import MARKER
from tests.e2e.conftest import stack_of_its_own
from tests.support.package_index import PackageIndex, package_index
from tests.support.procs import SESSION_MARKER, job_processes, wait_until
from tests.support.stack import Stack
from tests.support.wheels import build_wheel

TRAIN = b"""
import os
import launchbay_probe
print("probe says", launchbay_probe.hello(), "rank", os.environ.get("RANK"))
with open(os.path.join(os.environ["LAUNCHBAY_OUTPUT_DIR"], "probe.txt"), "w") as out:
    out.write(launchbay_probe.hello())
"""
# What a job can see: its environment, every command line and every environment it may read.
DUMP = b"""
import json, os
from pathlib import Path
seen = {"environ": dict(os.environ), "cmdlines": [], "environs": []}
for proc in Path("/proc").iterdir():
    for kind, part in (("cmdlines", "cmdline"), ("environs", "environ")):
        try:
            raw = (proc / part).read_bytes()
        except OSError:
            continue
        seen[kind].append(raw.replace(b"\\0", b" ").decode("utf-8", "replace"))
Path(os.environ["LAUNCHBAY_OUTPUT_DIR"], "seen.json").write_text(json.dumps(seen))
"""
PASSWORD = secrets.token_urlsafe(16)
ADMIN_TOKEN = f"lb_{secrets.token_urlsafe(32)}"
OTHER_SECRET = secrets.token_urlsafe(16)


def command_lines() -> list[str]:
    """Every process's command line, as any local user reads it."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found


@dataclass
class EnvStack:
    stack: Stack
    index: PackageIndex
    # uv's command lines, read while it asked the index (so while it ran), by path asked.
    uv_command_lines: dict[str, list[str]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def env_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvStack]:
    """A stack whose worker installs from a private index, its password in
    LAUNCHBAY_PIP_INDEX_URL, with an unrelated secret in its environment, as operators leave
    them."""
    root = tmp_path_factory.mktemp("environment")
    wheels = root / "wheels"
    build_wheel(wheels, "launchbay-probe", "1.0", "def hello():\n    return 'hello'\n")
    build_wheel(wheels, "launchbay-dump-probe", "1.0", "VALUE = 1\n")
    seen: dict[str, list[str]] = {}

    def look_at_uv(path: str) -> None:
        uv = [line for line in command_lines() if " pip install " in line]
        seen.setdefault(path, []).extend(uv)

    with package_index(wheels, "ci", PASSWORD, look_at_uv) as index:
        settings = {
            "LAUNCHBAY_PIP_INDEX_URL": index.url,
            "UV_CACHE_DIR": str(root / "uv-cache"),
            "ADMIN": ADMIN_TOKEN,
            "SITE_SECRET": OTHER_SECRET,
        }
        with stack_of_its_own(root, **settings) as stack:
            yield EnvStack(stack, index, seen)


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


def test_a_job_s_requirements_are_installed_cached_and_checked(env_stack: EnvStack) -> None:
    stack = env_stack.stack
    with stack.client() as http:
        code = archive({"train.py": TRAIN, "requirements.txt": b"launchbay-probe==1.0\n"})
        code_id = upload(http, code)
        first = run(stack, http, {"name": "env-first", "code": {"code_id": code_id}}, {"succeeded"})
        text = logs(http, first["id"])
        assert "probe says hello rank 0" in text
        built = re.search(r"\[environment\] ready in [\d.]+ s \(built, (\w+)", text)
        assert built, text
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
        assert f"(cached, {built.group(1)})" in text, "the first job's environment"
    for job in (first, second):
        assert wait_until(lambda job=job: job_processes(job["id"]) == [], timeout=10)


def test_nothing_of_the_worker_s_secrets_reaches_a_rank_or_a_command_line(
    env_stack: EnvStack,
) -> None:
    stack, index = env_stack.stack, env_stack.index
    secrets_ = (PASSWORD, ADMIN_TOKEN, OTHER_SECRET)
    with stack.client() as http:
        code_id = upload(http, archive({"dump.py": DUMP}))
        spec = {
            "name": "env-dump",
            "code": {"code_id": code_id, "entrypoint": "dump.py"},
            "launcher": "python",
            "environment": {"requirements": ["launchbay-dump-probe"]},
        }
        job = run(stack, http, spec, {"succeeded", "failed"})
        assert job["state"] == "succeeded", job["message"]
        text = logs(http, job["id"])
        seen = http.get(f"/v1/jobs/{job['id']}/artifacts/seen.json").json()

    # uv had the password (the index let it in) from its environment, not its command line.
    assert "/simple/launchbay-dump-probe/" in index.authorized
    ours = str(stack.data_dir.resolve() / "envs")
    uv_lines = env_stack.uv_command_lines["/simple/launchbay-dump-probe/"]
    assert [line for line in uv_lines if ours in line], "the worker's uv ran as it asked"
    everything_uv = [line for lines in env_stack.uv_command_lines.values() for line in lines]
    assert [line for line in everything_uv if PASSWORD in line] == []
    assert "(built," in text and PASSWORD not in text

    # The rank has what programs rely on, and what the operator named, and nothing secret.
    environ = seen["environ"]
    assert environ["PATH"] == os.environ["PATH"]
    assert environ[SESSION_MARKER] == MARKER, "named in LAUNCHBAY_JOB_PASS_ENV by the stack"
    for name in ("LAUNCHBAY_PIP_INDEX_URL", "ADMIN", "SITE_SECRET", "LAUNCHBAY_DATABASE_URL"):
        assert name not in environ, name
    everything = json.dumps(seen)
    assert [s for s in secrets_ if s in everything] == []
    assert seen["cmdlines"], "the job read the command lines of the processes it can see"
    for path in (stack.data_dir / "envs").rglob("*"):
        assert path.is_dir() or PASSWORD.encode() not in path.read_bytes(), path
