"""R12's short form: the chaos soak (devstack.chaos) for about a minute on each database, each
kind of fault in turn (a worker, the API, Redis, a rank SIGKILLed and restarted), then every job
accounted for. `python -m bench chaos` runs it for 20 minutes."""

from pathlib import Path

from devstack.chaos import FAULTS, SoakPlan, run_soak, soak_stack
from tests.support.isolation import reachable_by_job_users

PLAN = SoakPlan(duration_s=44, jobs=4, fault_every_s=(8, 10), cycle=True, settle_s=180)


def test_faults_of_every_kind_leave_no_job_stuck_failed_or_incomplete(
    tmp_path: Path, database_url: str
) -> None:
    with soak_stack(reachable_by_job_users(tmp_path / "soak"), database_url) as soak:
        report = run_soak(soak.stack, soak.redis, PLAN, soak.integrity)
        # What the workers said of processes they stopped: where a failure would start.
        kills = [line for line in soak.stack.worker_logs().splitlines() if "kill" in line]
    said = f"{report.summary()}; failed: {report.failed}; the workers' kills: {kills[-20:]}"
    print(f"\nR12 short: {report.summary()}")
    assert set(report.faults) == set(FAULTS), said
    assert report.jobs == PLAN.jobs
    assert report.states == {"succeeded": PLAN.jobs}, said
    assert report.checkpoints >= 3 * PLAN.jobs
    assert report.clean, (
        report.stuck,
        report.failed,
        report.gaps,
        report.duplicates,
        report.bad_checkpoints,
        report.orphans,
        report.integrity,
    )
