"""`launchbay run` and `launchbay artifacts` against a fake API: what is sent (and what is
not), where downloads land (never outside DEST), and the exit status of each outcome."""

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from client import AsyncClient
from client.artifact_files import UnsafeArtifactPath
from client.cli import CliState, app
from client.models import Limits
from client.packing import packed_directory
from client.sdk import Client
from tests.unit.client.conftest import API_URL, FakeApi, job, reply

LIMITS = {"max_upload_bytes": 1 << 20, "max_code_files": 100, "max_code_unpacked_bytes": 1 << 22}
ARTIFACTS = "/v1/jobs/j1/artifacts"


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAUNCHBAY_API_URL", "LAUNCHBAY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Client, "_backoff", lambda self, attempt, server_ms=None: None)


def launchbay(api: FakeApi, *args: str) -> Result:
    state = CliState(api_url=API_URL, token="t", transport=api.transport)
    return CliRunner().invoke(app, list(args), obj=state)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "mnist"
    root.mkdir()
    (root / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(root)
    return root


def serving_jobs(api: FakeApi, end: str = "succeeded") -> FakeApi:
    api.on("GET", "/v1/limits", reply(200, LIMITS))
    api.on("POST", "/v1/jobs", reply(201, job(state="queued")))
    return api.on("GET", "/v1/jobs/j1", reply(200, job(state=end, exit_reason="completed")))


def uploads(api: FakeApi) -> list[httpx.Request]:
    return api.sent("POST", "/v1/code")


def sent_spec(api: FakeApi) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(api.sent("POST", "/v1/jobs")[-1].content)
    return body


def test_run_uploads_a_new_directory_submits_and_follows(api: FakeApi, project: Path) -> None:
    serving_jobs(api)
    api.on("POST", "/v1/code", reply(201, {"code_id": "x", "sha256": "x", "size": 1}))
    result = launchbay(api, "run", "--queue", "q", "--", "python", "train.py", "--queue", "z")
    assert result.exit_code == 0, result.output
    asked = [r for r in api.requests if r.url.path.startswith("/v1/code/")]
    code_id = asked[-1].url.path.rsplit("/", 1)[1]
    body = uploads(api)[0].content
    archive = body.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n--", 1)[0]
    assert hashlib.sha256(archive).hexdigest() == code_id  # asked for by its content
    assert sent_spec(api) == {
        "name": "mnist-train",
        "code": {"code_id": "x", "entrypoint": "train.py"},
        "args": ["--queue", "z"],
        "nproc_per_node": 1,
        "queue": "q",
    }
    assert b'filename="mnist.tar.gz"' in body
    assert "packed 1 files" in result.stderr and ": uploaded" in result.stderr
    assert "job j1 succeeded (completed)" in result.stdout


def test_run_does_not_upload_what_the_api_has(api: FakeApi, project: Path) -> None:
    serving_jobs(api)
    with packed_directory(project, Limits(**LIMITS)) as packed:
        sha256 = packed.sha256
    api.on(
        "GET", f"/v1/code/{sha256}", reply(200, {"code_id": sha256, "sha256": sha256, "size": 1})
    )
    argv = ["run", "--nproc-per-node", "2", "python", "train.py", "--nproc-per-node", "9"]
    result = launchbay(api, *argv)
    assert result.exit_code == 0, result.output
    assert uploads(api) == [] and "unchanged since uploaded" in result.stderr
    spec = sent_spec(api)
    assert spec["code"]["code_id"] == sha256
    assert (spec["nproc_per_node"], spec["args"]) == (2, ["--nproc-per-node", "9"])


def test_a_spec_file_gives_the_other_fields(api: FakeApi, project: Path) -> None:
    serving_jobs(api)
    api.on("POST", "/v1/code", reply(201, {"code_id": "x", "sha256": "x", "size": 1}))
    (project / "job.yaml").write_text("name: mine\ndevice: cpu\nnproc_per_node: 4\nargs: [a]\n")
    result = launchbay(api, "run", "-f", "job.yaml", "--env", "A=1=2", "--", "train.py", "b")
    assert result.exit_code == 0, result.output
    spec = sent_spec(api)
    assert (spec["name"], spec["device"], spec["nproc_per_node"]) == ("mine", "cpu", 4)
    assert (spec["args"], spec["env"]) == (["b"], {"A": "1=2"})


@pytest.mark.parametrize(("end", "status"), [("failed", 1), ("cancelled", 2)])
def test_run_exits_as_submit_wait(api: FakeApi, project: Path, end: str, status: int) -> None:
    serving_jobs(api, end)
    api.on("POST", "/v1/code", reply(201, {"code_id": "x", "sha256": "x", "size": 1}))
    assert launchbay(api, "run", "--", "train.py").exit_code == status


def test_a_directory_over_the_limit_is_refused_before_uploading(
    api: FakeApi, project: Path
) -> None:
    serving_jobs(api)
    (project / "weights.bin").write_bytes(os.urandom(3 << 20))
    result = launchbay(api, "run", "--", "python", "train.py")
    assert result.exit_code == 1
    assert result.stderr.startswith("error payload_too_large: the directory packs to more than")
    assert "the biggest files: weights.bin (3.0 MiB), train.py (18 bytes)" in result.stderr
    assert [r.url.path for r in api.requests] == ["/v1/limits"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--", "bash", "go.sh"], "error invalid_command: cannot run 'bash'"),
        (["--", "python", "-m", "pkg"], "error invalid_command: cannot run 'python -m pkg'"),
        (["--", "python", "../train.py"], "error invalid_command: ../train.py is outside"),
        (["--env", "NOEQUALS", "--", "train.py"], "error invalid_command: --env takes"),
        (["--", "python", "nope.py"], "error entrypoint_not_packed: nope.py is not among"),
    ],
)
def test_a_bad_command_exits_2_and_submits_nothing(
    api: FakeApi, project: Path, argv: list[str], says: str
) -> None:
    serving_jobs(api)
    api.on("GET", "/v1/code/" + "0" * 64, reply(404))
    api.on("POST", "/v1/code", reply(201, {"code_id": "x", "sha256": "x", "size": 1}))
    result = launchbay(api, "run", *argv)
    assert result.exit_code == 2 and result.stderr.startswith(says), result.output
    assert api.sent("POST", "/v1/jobs") == []


def artifact(path: str, size: int = 3) -> dict[str, Any]:
    return {"path": path, "size": size, "modified_at": "2024-01-01T00:00:00Z"}


def test_artifacts_lists_and_downloads_into_dest(api: FakeApi, tmp_path: Path) -> None:
    items = [artifact("model.pt"), artifact("plots/loss.png")]
    api.on("GET", ARTIFACTS, reply(200, {"items": items, "truncated": False}))
    api.on("GET", ARTIFACTS + "/model.pt", reply(200, content=b"pt!"))
    api.on("GET", ARTIFACTS + "/plots/loss.png", reply(200, content=b"png"))
    listed = launchbay(api, "artifacts", "j1")
    assert listed.exit_code == 0 and "plots/loss.png" in listed.stdout
    dest = tmp_path / "out"
    result = launchbay(api, "artifacts", "j1", "-o", str(dest))
    assert result.exit_code == 0, result.output
    assert (dest / "model.pt").read_bytes() == b"pt!"
    assert (dest / "plots" / "loss.png").read_bytes() == b"png"
    one = launchbay(api, "artifacts", "j1", "plots", "-o", str(tmp_path / "one"))
    assert one.exit_code == 0 and [p.name for p in (tmp_path / "one").rglob("*")] == [
        "plots",
        "loss.png",
    ]


def test_a_path_out_of_the_artifacts_goes_to_the_api_as_written(
    api: FakeApi, tmp_path: Path
) -> None:
    api.on("GET", ARTIFACTS, reply(200, {"items": [], "truncated": False}))
    dest = tmp_path / "dest"
    result = launchbay(api, "artifacts", "j1", "../../etc/passwd", "-o", str(dest))
    assert result.exit_code == 1, result.output
    asked = api.requests[-1].url.raw_path
    assert asked == b"/v1/jobs/j1/artifacts/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd"
    assert not (tmp_path / "etc").exists() and list(tmp_path.rglob("passwd")) == []


def test_paths_a_hostile_server_lists_are_never_written_outside_dest(
    api: FakeApi, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "logs").symlink_to(outside)
    api.on("GET", ARTIFACTS + "/%2E%2E%2Fevil", reply(200, content=b"evil"))
    for path in ["../evil", "/tmp/evil", "a/./b", "logs/x.txt"]:
        api.replace("GET", ARTIFACTS, reply(200, {"items": [artifact(path)]}))
        api.on("GET", f"{ARTIFACTS}/{path}", reply(200, content=b"evil"))
        result = launchbay(api, "artifacts", "j1", "-o", str(dest))
        assert result.exit_code == 1 and "refusing to write artifact" in result.stderr, path
    assert list(outside.iterdir()) == [] and not (tmp_path / "evil").exists()


def test_the_async_client_runs_a_directory_and_downloads_as_the_client_does(
    api: FakeApi, project: Path, tmp_path: Path
) -> None:
    serving_jobs(api)
    api.on("POST", "/v1/code", reply(201, {"code_id": "x", "sha256": "x", "size": 1}))
    api.on("GET", ARTIFACTS, reply(200, {"items": [artifact("a/b.txt"), artifact("../up")]}))
    api.on("GET", ARTIFACTS + "/a/b.txt", reply(200, content=b"abc"))

    async def scenario(lb: AsyncClient) -> None:
        submitted = await lb.run_program(["torchrun", "--nnodes", "1", "train.py"])
        assert submitted.id == "j1"
        assert sent_spec(api)["nnodes"] == 1 and len(uploads(api)) == 1
        with pytest.raises(UnsafeArtifactPath):
            await lb.download_artifacts("j1", dest=tmp_path / "d")
        assert await lb.download_artifacts("j1", "a", tmp_path / "d") == [tmp_path / "d/a/b.txt"]

    async def main() -> None:
        async with AsyncClient(API_URL, "t", transport=httpx.MockTransport(api)) as lb:
            await scenario(lb)

    asyncio.run(main())
    assert (tmp_path / "d" / "a" / "b.txt").read_bytes() == b"abc"
    assert not (tmp_path / "up").exists()
