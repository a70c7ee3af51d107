"""`launchbay download --no-clobber`: a checkpoint saved where one already is goes beside it
(what the demo does, so that a second run keeps the first run's checkpoint)."""

from pathlib import Path

import pytest

from client.cli.jobs import unused_path
from tests.unit.client.conftest import FakeApi
from tests.unit.client.test_client_cli import launchbay
from tests.unit.client.test_client_download import URL as DOWNLOAD_URL
from tests.unit.client.test_client_download import FileServer


def test_an_unused_path_is_the_first_free_numbered_name(tmp_path: Path) -> None:
    best = tmp_path / "digits-best.pt"
    assert unused_path(best) == best
    best.write_bytes(b"first")
    assert unused_path(best) == tmp_path / "digits-best-2.pt"
    (tmp_path / "digits-best-2.pt").write_bytes(b"second")
    assert unused_path(best) == tmp_path / "digits-best-3.pt"
    assert unused_path(tmp_path) == tmp_path  # a directory: the file goes inside it


@pytest.mark.parametrize("flag", [[], ["--no-clobber"]])
def test_download_no_clobber_keeps_the_file_there_and_says_where_it_saved(
    api: FakeApi, tmp_path: Path, flag: list[str]
) -> None:
    api.on("GET", DOWNLOAD_URL, FileServer())
    first = tmp_path / "digits-best.pt"
    first.write_bytes(b"the first run's checkpoint")
    result = launchbay(api, "download", "j1", "-o", str(first), *flag)
    assert result.exit_code == 0, result.output
    if not flag:  # without it, -o is overwritten, as before
        assert first.stat().st_size == 1024 * 1024
        return
    assert first.read_bytes() == b"the first run's checkpoint"
    second = tmp_path / "digits-best-2.pt"
    assert second.stat().st_size == 1024 * 1024
    assert result.stdout.strip() == f"saved {second} (sha256 verified)"
