"""The next job under a pool user finds nothing of the last one's owner: Alice's job leaves a 0600
file in /tmp, /var/tmp and /dev/shm, a System V segment and message queue and a compiled
extension; Bob's job, given the same job user next (a pool of one), reads none of them, cannot
read Alice's upload by its code_id, and cannot have the worker copy her builds into his cache
through a linked ``$HOME/.cache`` (issue 34, items 3, 5 and 6). Real API, worker, job users."""

import hashlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import stack_of_its_own
from tests.support.stack import Stack
from worker.build_cache import owner_cache
from worker.isolation import can_switch_users

pytestmark = pytest.mark.skipif(not can_switch_users(), reason="job users need a root worker")

PROGRAMS = Path(__file__).parent / "programs"
TERMINAL = {"succeeded", "failed", "cancelled"}
TAG = uuid.uuid4().hex[:12]
KEY = 0x4C420000 + int(TAG[:4], 16)  # System V key of the planted segment and queue
SECRET = f"alice-secret-{TAG}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("leftovers")
    with stack_of_its_own(root, LAUNCHBAY_JOB_USERS="1") as running:  # the next job reuses it
        try:
            yield running
        finally:
            _remove_what_alice_left()


def _remove_what_alice_left() -> None:
    """Where the worker let the plants survive (the bug), the host keeps nothing of them."""
    for directory in ("/tmp", "/var/tmp", "/dev/shm"):
        Path(directory, f"leftover-{TAG}").unlink(missing_ok=True)
    for kind in ("-M", "-Q"):
        subprocess.run(["ipcrm", kind, str(KEY)], capture_output=True)


def owner(http: httpx.Client, name: str) -> dict[str, str]:
    made = http.post("/v1/tokens", json={"name": name})
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def upload(http: httpx.Client, as_owner: dict[str, str], program: str) -> str:
    body = (PROGRAMS / program).read_bytes()
    sent = http.post("/v1/code", files={"file": (program, body)}, headers=as_owner)
    assert sent.status_code in (200, 201), sent.text
    return str(sent.json()["code_id"])


def run(
    stack: Stack, http: httpx.Client, as_owner: dict[str, str], program: str, env: dict[str, str]
) -> tuple[dict[str, Any], list[str]]:
    """Run `program` (its own upload) to its end; (the job, its log lines). Other sessions on
    this host may hold the one job user a moment: such a launch is tried again."""
    code = {"code_id": upload(http, as_owner, program), "entrypoint": program}
    body = {"name": program, "code": code, "launcher": "python", "nproc_per_node": 1, "env": env}
    for _ in range(60):
        created = http.post("/v1/jobs", json=body, headers=as_owner)
        assert created.status_code == 201, created.text
        job = stack.wait_for_state(http, created.json()["id"], TERMINAL, timeout=120)
        if "job users of this worker's host are in use" not in (job["message"] or ""):
            break
        time.sleep(1)
    logs = http.get(f"/v1/jobs/{job['id']}/logs", params={"limit": 1000}).json()["items"]
    return job, [item["line"] for item in logs]


def reported(lines: list[str], prefix: str) -> dict[str, Any]:
    found = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
    assert found, lines
    result: dict[str, Any] = json.loads(found[-1])
    return result


def test_the_next_owner_on_the_same_job_user_reads_nothing_the_last_one_left(
    stack: Stack,
) -> None:
    with stack.client() as http:
        alice, bob = owner(http, "alice"), owner(http, "bob")
        env = {"LEFTOVER_TAG": TAG, "LEFTOVER_KEY": str(KEY), "LEFTOVER_SECRET": SECRET}
        planted, plant_lines = run(stack, http, alice, "leftovers_plant.py", env)
        assert planted["state"] == "succeeded", (planted, plant_lines)
        alice_code = upload(http, alice, "leftovers_plant.py")
        assert (owner_cache(stack.data_dir.resolve(), "alice") / "alice_op").is_dir()

        cache_key = hashlib.sha256(b"alice").hexdigest()[:32]
        env |= {
            "LEFTOVER_CODE_ID": alice_code,
            "LEFTOVER_CODE_FILE": "leftovers_plant.py",
            "LEFTOVER_CACHE_KEY": cache_key,
        }
        probed, probe_lines = run(stack, http, bob, "leftovers_probe.py", env)
    assert probed["state"] == "succeeded", (probed, probe_lines)
    found = reported(probe_lines, "PROBE ")
    assert found.pop("uid") == reported(plant_lines, "PLANT ")["uid"]  # the same job user
    assert found == {
        "/tmp": "FileNotFoundError",
        "/var/tmp": "FileNotFoundError",
        "/dev/shm": "FileNotFoundError",
        "shm": "No such file or directory",
        "msg": "No such file or directory",
        "code": "PermissionError",
    }
    # The worker copied nothing of Alice's builds into Bob's cache, through his link.
    bobs = owner_cache(stack.data_dir.resolve(), "bob")
    assert not bobs.exists() or "alice_op" not in {p.name for p in bobs.iterdir()}
    # And the host keeps nothing Alice's job planted.
    assert not any(Path(d, f"leftover-{TAG}").exists() for d in ("/tmp", "/var/tmp", "/dev/shm"))
    segments = subprocess.run(["ipcs", "-m", "-q"], capture_output=True, text=True).stdout
    assert f"0x{KEY:08x}" not in segments
