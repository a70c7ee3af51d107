"""The environment cache with real uv and a wheelhouse (no index, no network): two jobs that
ask for the same packages at the same time get one build; the environment sees its own
packages first and the worker's (torch) after them."""

import ast
import subprocess
import threading
from pathlib import Path

import pytest

from tests.support.wheels import build_wheel
from worker.environment import Environment, EnvironmentCache, Sources


def test_two_jobs_asking_at_once_get_one_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "launchbay-probe", "1.0", "VALUE = 'probe'\n")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    cache = EnvironmentCache(tmp_path / "envs", 1 << 40, Sources("none", (str(wheels),)))
    results: list[Environment] = []
    outputs: list[list[str]] = [[], []]

    def prepare(index: int) -> None:
        results.append(cache.prepare(["launchbay-probe==1.0"], outputs[index].append))

    threads = [threading.Thread(target=prepare, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == 2
    assert results[0].key == results[1].key
    assert sorted(r.cached for r in results) == [False, True], "built once"
    assert sum(any("launchbay-probe" in line for line in out) for out in outputs) == 1

    probe = subprocess.run(
        [str(results[0].python), "-c", "import launchbay_probe, torch, sys; print(sys.path)"],
        capture_output=True,
        text=True,
        check=True,
    )
    path = ast.literal_eval(probe.stdout)
    own = next(i for i, p in enumerate(path) if p.startswith(str(results[0].root)))
    worker = next(i for i, p in enumerate(path) if "site-packages" in p and i != own)
    assert own < worker, "the job's packages first, the worker's after"
