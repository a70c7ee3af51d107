"""`launchbay api --workers N`: one process serves the app it built; several build their own."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from typer.testing import CliRunner

from client.cli import app as cli
from service import app as service_app


@pytest.fixture
def served(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[list[tuple[Any, dict[str, Any]]]]:
    calls: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setenv("LAUNCHBAY_DATA_DIR", str(tmp_path))
    service_app.get_settings.cache_clear()
    monkeypatch.setattr(service_app, "upgrade_database", lambda url: None)
    monkeypatch.setattr(uvicorn, "run", lambda target, **kw: calls.append((target, kw)))
    yield calls
    service_app.get_settings.cache_clear()


def test_one_worker_serves_the_app_object(served: list[tuple[Any, dict[str, Any]]]) -> None:
    result = CliRunner().invoke(cli, ["api", "--port", "8123"])
    assert result.exit_code == 0, result.output
    ((target, options),) = served
    assert not isinstance(target, str)
    assert options["port"] == 8123 and "workers" not in options


def test_several_workers_each_build_the_app(served: list[tuple[Any, dict[str, Any]]]) -> None:
    result = CliRunner().invoke(cli, ["api", "--workers", "3"])
    assert result.exit_code == 0, result.output
    ((target, options),) = served
    assert target == "service.app:create_app"
    assert options["factory"] is True and options["workers"] == 3


def test_workers_must_be_positive(served: list[tuple[Any, dict[str, Any]]]) -> None:
    assert CliRunner().invoke(cli, ["api", "--workers", "0"]).exit_code != 0
    assert served == []
