"""What the API says of a job it accepted (its `warnings`, e.g. live workers of its queue that
could never run it) is said at once by `launchbay submit`, on stderr."""

import json
from pathlib import Path

import pytest

from tests.unit.client.conftest import FakeApi, job, reply
from tests.unit.client.test_client_cli import launchbay

WARNING = (
    "some live workers of queue 'default' could never run this job: cpu-pair (no GPU "
    "(device: cuda)); one of them may take it and fail it with launch_error"
)


@pytest.mark.parametrize("as_json", [False, True])
def test_submit_says_the_warnings_of_the_accepted_job(
    api: FakeApi, tmp_path: Path, as_json: bool
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nrecipe: synthetic\ndevice: cuda\n")
    api.on("POST", "/v1/jobs", reply(201, job(state="queued", warnings=[WARNING])))
    result = launchbay(api, "submit", str(spec), *(["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    assert " ".join(result.stderr.split()) == f"warning: {WARNING}"
    if as_json:
        assert json.loads(result.stdout)["warnings"] == [WARNING]
    else:
        assert result.stdout.startswith("submitted job j1 (demo): queued")
