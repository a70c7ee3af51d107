"""R12's short form: the chaos soak (devstack.chaos) for about a minute on each database, each
kind of fault in turn (a worker, the API, Redis, a rank SIGKILLed and restarted), then every job
accounted for. `python -m bench chaos` runs it for 20 minutes.

The soaks on SQLite and on PostgreSQL run side by side, each on a stack and a Redis of its own
(each fault picks among its own soak's processes): most of a soak is waiting for its faults and
jobs, so the two together take about as long as one."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devstack.chaos import FAULTS, SoakPlan, SoakReport, run_soak, soak_stack
from tests.support.isolation import reachable_by_job_users

PLAN = SoakPlan(duration_s=44, jobs=4, fault_every_s=(6, 8), cycle=True, settle_s=180)


def soak(root: Path, database_url: str) -> tuple[SoakReport, list[str]]:
    """The soak's report, and what its workers said of processes they stopped: where a failure
    would start."""
    with soak_stack(reachable_by_job_users(root), database_url) as running:
        report = run_soak(running.stack, running.redis, PLAN, running.integrity)
        kills = [line for line in running.stack.worker_logs().splitlines() if "kill" in line]
    return report, kills


def test_faults_of_every_kind_leave_no_job_stuck_failed_or_incomplete(
    tmp_path: Path, sqlite_url: str, postgres_url: str
) -> None:
    databases = {"sqlite": sqlite_url, "postgres": postgres_url}
    with ThreadPoolExecutor(len(databases)) as pool:
        soaks = {
            kind: pool.submit(soak, tmp_path / f"soak-{kind}", url)
            for kind, url in databases.items()
        }
        results = {kind: future.result() for kind, future in soaks.items()}
    for kind, (report, kills) in results.items():
        said = f"{kind}: {report.summary()}; failed: {report.failed}; the workers' kills: "
        said += str(kills[-20:])
        print(f"\nR12 short ({kind}): {report.summary()}")
        assert set(report.faults) == set(FAULTS), said
        assert report.jobs == PLAN.jobs, said
        assert report.states == {"succeeded": PLAN.jobs}, said
        assert report.checkpoints >= 3 * PLAN.jobs, said
        assert report.clean, (
            kind,
            report.stuck,
            report.failed,
            report.gaps,
            report.duplicates,
            report.bad_checkpoints,
            report.orphans,
            report.integrity,
        )
