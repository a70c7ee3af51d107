"""The executors Launchbay knows, by name, and the one that runs each job's queue (after
torchx's `schedulers/__init__.py`: a name -> factory map, each with settings of its own).

    register(name, factory, settings_model, *, secret_env=..., placement=None)

- `settings_model()` reads the executor's settings from its own environment variables
  (`SlurmSettings`: `LAUNCHBAY_SLURM_QUEUES`); its `owned_queues()` are the queues whose
  jobs it runs. The default executor, `rq`, runs every queue no other one owns.
- `factory(context, its_settings)` makes the executor for a process (`ExecutorContext`:
  the service's settings, its Redis and its database engine).
- `secret_env`: the variables of its backend's credentials (names, or prefixes ending in
  `*`), which the ranks never get (`worker.passed_env`), whether or not it is in use.
- `placement(environ)`: where the supervisor of one node of its allocations runs, for
  `python -m worker.node --executor NAME` (`NodePlacement`); None: the node given on the
  command line, and this host.

`make_executor` is what the API, the reaper and the worker call: the default executor
alone, or a `RoutingExecutor` that hands each job to the executor owning its queue. The
reaper and `POST /v1/dry-run` ask whatever they get, and never name one.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis import Redis
from sqlalchemy.engine import Engine

from service.executors.base import DryRunPlan, Executor, NodePlacement, TaskPlan, TaskStatus
from service.executors.dispatch import DispatchExecutor
from service.executors.rq import RQExecutor, RQSettings
from service.executors.slurm.allocation import slurm_placement
from service.executors.slurm.executor import SlurmExecutor
from service.executors.slurm.queues import SlurmSettings
from service.models import Job
from service.settings import Settings

DEFAULT = "rq"


class ExecutorSettings(Protocol):
    def owned_queues(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class ExecutorContext:
    """What a factory may build an executor on: the process's settings, Redis and engine."""

    settings: Settings
    redis: Redis
    engine: Engine


@dataclass(frozen=True)
class Registration:
    name: str
    factory: Callable[[ExecutorContext, Any], Executor]
    settings_model: Callable[[], ExecutorSettings]
    secret_env: frozenset[str] = frozenset()
    placement: Callable[[Mapping[str, str]], NodePlacement] | None = None


REGISTRY: dict[str, Registration] = {}


def register(
    name: str,
    factory: Callable[[ExecutorContext, Any], Executor],
    settings_model: Callable[[], ExecutorSettings],
    *,
    secret_env: Iterable[str] = (),
    placement: Callable[[Mapping[str, str]], NodePlacement] | None = None,
) -> None:
    """Make an executor known by `name` (registering a name again replaces it)."""
    REGISTRY[name] = Registration(name, factory, settings_model, frozenset(secret_env), placement)


class RoutingExecutor:
    """An executor that hands each job to the executor owning its queue, else to `default`."""

    def __init__(self, default: Executor, routes: Mapping[str, Executor]) -> None:
        self.default, self.routes = default, dict(routes)
        parts = [default, *routes.values()]
        self.name = default.name
        self.reports_ends = any(p.reports_ends for p in parts)
        self.secret_env = frozenset().union(*(p.secret_env for p in parts))

    def for_job(self, job: Job) -> Executor:
        return self.routes.get(job.queue, self.default)

    def parts(self) -> list[tuple[Executor, frozenset[str] | None]]:
        """Each executor behind it with the queues it owns (None: every other queue)."""
        owned: dict[int, tuple[Executor, set[str]]] = {}
        for queue, executor in self.routes.items():
            owned.setdefault(id(executor), (executor, set()))[1].add(queue)
        return [(self.default, None), *((e, frozenset(q)) for e, q in owned.values())]

    def plan(self, job: Job) -> list[TaskPlan]:
        return self.for_job(job).plan(job)

    def dry_run(self, job: Job) -> DryRunPlan:
        return self.for_job(job).dry_run(job)

    def submit(self, job: Job) -> None:
        self.for_job(job).submit(job)

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
        by_executor: dict[int, tuple[Executor, list[Job]]] = {}
        for job in jobs:
            executor = self.for_job(job)
            by_executor.setdefault(id(executor), (executor, []))[1].append(job)
        described: dict[str, list[TaskStatus]] = {}
        for executor, its_jobs in by_executor.values():
            described.update(executor.describe(its_jobs))
        return described

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None:
        self.for_job(job).resubmit(job, task_ids)

    def cancel(self, job: Job) -> None:
        self.for_job(job).cancel(job)


def parts_of(executor: Executor) -> list[tuple[Executor, frozenset[str] | None]]:
    """The executors behind `executor`, each with the queues it owns (None: all the others)."""
    if isinstance(executor, RoutingExecutor):
        return executor.parts()
    return [(executor, None)]


def read_executor_settings(
    given: Mapping[str, ExecutorSettings] | None = None,
) -> dict[str, ExecutorSettings]:
    """Each registered executor's settings: from `given`, else read from the environment."""
    given = given or {}
    return {
        name: given[name] if name in given else registration.settings_model()
        for name, registration in REGISTRY.items()
    }


def make_executor(
    settings: Settings,
    redis: Redis,
    engine: Engine,
    executor_settings: Mapping[str, ExecutorSettings] | None = None,
) -> Executor:
    """The executor for this process: the default one, with those that own queues beside
    it (their settings from `executor_settings`, else from the environment)."""
    context = ExecutorContext(settings, redis, engine)
    configured = read_executor_settings(executor_settings)
    default = REGISTRY[DEFAULT].factory(context, configured[DEFAULT])
    routes: dict[str, Executor] = {}
    for name, registration in REGISTRY.items():
        queues = configured[name].owned_queues()
        if name == DEFAULT or not queues:
            continue
        executor = registration.factory(context, configured[name])
        routes.update(dict.fromkeys(queues, executor))
    return RoutingExecutor(default, routes) if routes else default


def routed_queues(
    executor_settings: Mapping[str, ExecutorSettings] | None = None,
) -> frozenset[str]:
    """The queues another executor than the default owns (they schedule their jobs
    themselves: the dispatcher leaves them alone)."""
    configured = read_executor_settings(executor_settings)
    return frozenset().union(
        *(own.owned_queues() for name, own in configured.items() if name != DEFAULT)
    )


def secret_env() -> frozenset[str]:
    """The credentials' variables of every registered executor's backend."""
    return frozenset().union(*(r.secret_env for r in REGISTRY.values()))


def placement_for(name: str, environ: Mapping[str, str]) -> NodePlacement | None:
    """Where a node of an allocation of executor `name` runs, as its backend tells it."""
    registration = REGISTRY.get(name)
    if registration is None:
        raise KeyError(f"no executor named {name!r} (known: {', '.join(sorted(REGISTRY))})")
    return None if registration.placement is None else registration.placement(environ)


def _workers(context: ExecutorContext, own: RQSettings) -> Executor:
    """RQ workers, each job admitted onto them by the dispatcher (docs/scheduling.md)."""
    settings = context.settings
    return DispatchExecutor(context.redis, context.engine, grace_s=settings.cancel_grace_s)


def _slurm(context: ExecutorContext, own: SlurmSettings) -> Executor:
    settings = context.settings
    return SlurmExecutor(own.queues, data_dir=settings.data_dir, grace_s=settings.cancel_grace_s)


register(DEFAULT, _workers, RQSettings, secret_env=RQExecutor.secret_env)
register(
    "slurm",
    _slurm,
    SlurmSettings,
    secret_env=SlurmExecutor.secret_env,
    placement=slurm_placement,
)
