"""The import rules of docs/architecture.md, checked on the source: who may import whom."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions count)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def offending(package: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in sources(package):
        bad = sorted(
            m for m in imported_modules(path) if m.split(".")[0] in forbidden or m in forbidden
        )
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("jobs", ("service", "worker", "client", "bench", "tests")),
        ("service", ("worker", "client", "bench", "tests", "torch")),
        ("worker", ("client", "bench", "tests")),
    ],
)
def test_a_package_imports_only_what_lies_below_it(
    package: str, forbidden: tuple[str, ...]
) -> None:
    assert offending(package, forbidden) == {}


def test_the_contracts_import_nothing_but_each_other_and_pydantic() -> None:
    allowed = {"jobs.contract", "pydantic"}
    for path in sources("jobs/contract"):
        for module in imported_modules(path):
            top = module.split(".")[0]
            if module.startswith("jobs."):
                assert module.startswith("jobs.contract"), (path, module)
            else:
                assert top in sys.stdlib_module_names or top in allowed, (path, module)


def loaded_by(imports: str, tops: tuple[str, ...]) -> list[str]:
    """The modules under `tops` that a fresh interpreter has loaded after `imports`."""
    code = (
        f"import sys\nimport {imports}\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {tops!r}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return list(ast.literal_eval(done.stdout))


def test_the_client_loads_nothing_of_the_server() -> None:
    # Only the CLI's server commands (`launchbay api`, `worker`...) import it, when run; of
    # jobs/ it may use the torch-free domain (the states).
    assert loaded_by("client, client.cli", ("service", "worker", "torch")) == []


# Bottom first: each module of the store imports only those before it.
STORE_LAYERS = [
    "webhook_outbox",
    "lifecycle",
    "nodes",
    "job_rows",
    "metric_rollups",
    "outputs",
    "checkpoints",
    "stream",
    "stacks",
    "log_search",
]


def test_the_store_is_layered_on_its_lifecycle_core() -> None:
    for i, layer in enumerate(STORE_LAYERS):
        below = {f"service.store.{name}" for name in STORE_LAYERS[:i]}
        used = {
            m
            for m in imported_modules(ROOT / f"service/store/{layer}.py")
            if m.startswith("service.store")
        }
        assert used <= below, (layer, sorted(used - below))


def test_distributed_does_not_import_the_events_module() -> None:
    # events imports distributed; the reverse would make a cycle.
    assert "jobs.runtime.events" not in imported_modules(ROOT / "jobs/runtime/distributed.py")


def test_the_contracts_and_the_service_load_without_torch() -> None:
    imports = (
        "jobs.contract.checkpoints, jobs.contract.env, jobs.contract.events, jobs.spec, "
        "jobs.states, service.app, service.reaper"
    )
    assert loaded_by(imports, ("torch",)) == []


def test_capture_imports_only_the_standard_library() -> None:
    # worker/rank_main.py loads it by its path before the program runs, under a private name:
    # it may import neither `jobs` (the program may have its own) nor anything installed.
    modules = sources("jobs/capture")
    assert len(modules) >= 3
    for path in modules:
        for module in imported_modules(path):
            assert module.split(".")[0] in sys.stdlib_module_names, (path, module)
