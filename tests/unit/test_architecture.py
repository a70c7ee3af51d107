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


# The service modules the worker may import (docs/architecture.md, "What the worker takes from
# the service"), by what it takes them for.
WORKER_MAY_IMPORT = frozenset(
    {
        # the database: engine and sessions, tables, the store's reads and writes, settings
        "service.db",
        "service.models",
        "service.settings",
        "service.records",
        # the executors: the seam, the registry (this process's executor, a node's placement,
        # the backends' secrets), the RQ task's name and shape, the worker records in Redis
        "service.executors.base",
        "service.executors.registry",
        "service.executors.rq",
        "service.worker_records",
        "service.schemas",
        # the artifact store: checkpoints kept, code and resume checkpoints fetched
        "service.artifacts",
        "service.artifacts.tree",
        # the dispatcher: a node's reserved devices, the worker's own queue, a wake-up, a preemption
        "service.scheduling.reservations",
        "service.scheduling.capacity",
        "service.executors.dispatch",
        "service.scheduling.preemption",
        # the owner's idle-GPU policy, judged by the attempt's GPU watch
        "service.scheduling.idle_gpu",
        # rules shared with the API: the admin's name, the hardening of processes and files
        "service.auth",
        "service.hardening",
    }
)
# Of the client, only the CLI's server commands import the service, each inside its command.
CLIENT_MAY_IMPORT = {
    "client/cli/server.py": frozenset(
        {
            "service.app",
            "service.artifacts",
            "service.db",
            "service.reaper",
            "service.settings",
            "service.storage_migrate",
        }
    ),
    "client/health.py": frozenset({"service.settings", "service.worker_records"}),
}


def module_named(package: str, name: str) -> str:
    """What `from package import name` imports: the module `package.name` when there is one
    in the repository, else (a name defined in it) `package`."""
    candidate = ROOT.joinpath(*package.split("."), name)
    if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
        return f"{package}.{name}"
    return package


def service_imports(path: Path) -> set[str]:
    """The modules of the service a file imports, at any depth (lazy imports count)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(module_named(node.module, alias.name) for alias in node.names)
    return {name for name in names if name.split(".")[0] == "service"}


def test_the_worker_imports_only_the_listed_service_modules() -> None:
    found = {str(path.relative_to(ROOT)): service_imports(path) for path in sources("worker")}
    unlisted = {path: sorted(used - WORKER_MAY_IMPORT) for path, used in found.items()}
    assert {path: mods for path, mods in unlisted.items() if mods} == {}
    # The list holds nothing the worker has stopped using.
    assert set().union(*found.values()) == WORKER_MAY_IMPORT


def test_the_client_imports_the_service_only_in_its_server_commands() -> None:
    found = {str(path.relative_to(ROOT)): service_imports(path) for path in sources("client")}
    unlisted = {
        path: sorted(used - CLIENT_MAY_IMPORT.get(path, frozenset()))
        for path, used in found.items()
    }
    assert {path: mods for path, mods in unlisted.items() if mods} == {}
    assert {path: found[path] for path in CLIENT_MAY_IMPORT} == CLIENT_MAY_IMPORT


def test_service_imports_are_found_at_any_depth_and_by_module(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import service.db\n"
        "from service import records\n"
        "from service.records import take_job\n"
        "from jobs.states import JobState\n"
        "def late() -> None:\n"
        "    from service.artifacts import tree, open_store\n"
    )
    assert service_imports(sample) == {
        "service.db",
        "service.records",
        "service.artifacts",
        "service.artifacts.tree",
    }


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


# Bottom first: each module of the records imports only those before it.
STORE_LAYERS = [
    "webhook_outbox",
    "goodput",
    "lifecycle",
    "nodes",
    "job_rows",
    "metric_rollups",
    "outputs",
    "checkpoints",
    "stream",
    "signals",
    "log_search",
    "goodput_summary",
]


def test_the_records_are_layered_on_its_lifecycle_core() -> None:
    for i, layer in enumerate(STORE_LAYERS):
        below = {f"service.records.{name}" for name in STORE_LAYERS[:i]}
        used = {
            m
            for m in imported_modules(ROOT / f"service/records/{layer}.py")
            if m.startswith("service.records")
        }
        assert used <= below, (layer, sorted(used - below))


def test_distributed_does_not_import_the_events_module() -> None:
    # events imports distributed; the reverse would make a cycle.
    assert "jobs.runtime.events" not in imported_modules(ROOT / "jobs/runtime/distributed.py")


def test_the_contracts_and_the_service_load_without_torch() -> None:
    imports = (
        "jobs.contract.checkpoints, jobs.contract.env, jobs.contract.events, "
        "jobs.contract.rank_files, jobs.contract.data_dir, jobs.spec, jobs.states, service.app, "
        "service.reaper"
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
