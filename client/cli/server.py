"""The server commands: api, worker, reaper, db upgrade. They import the service and the
worker only when run, so the client commands never load them, nor torch."""

from typing import Annotated

import typer

from client.cli.base import EXIT_FAILED, app, db_app, err, out, storage_app


@app.command()
def api(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            help="Processes serving the port (default 1); more use more CPU cores.",
        ),
    ] = 1,
) -> None:
    """Run the HTTP service (applies database migrations first)."""
    from service.app import run_api

    run_api(host, port, workers)


# The worker command's longer options.
GpusOption = Annotated[
    str | None,
    typer.Option(
        "--gpus",
        help="CUDA ids this worker owns, e.g. 0,1 (as CUDA_VISIBLE_DEVICES takes them); "
        "default: every visible CUDA device.",
    ),
]
SlotsOption = Annotated[
    int | None,
    typer.Option(
        "--slots",
        min=1,
        help="CPU slots of a worker without GPUs (default: the cores it may use).",
    ),
]
PoolOption = Annotated[
    str | None,
    typer.Option(
        "--pool",
        help="Share these devices with the other workers of this host in the same pool: "
        "under the dispatcher, each runs one job on the devices reserved for it, so a "
        "pool of N workers runs up to N jobs at once (docs/scheduling.md).",
    ),
]
CheckOption = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Start nothing: exit 0 if a worker of this host (LAUNCHBAY_WORKER_HOST) "
        "heart-beat in the last --max-age seconds, else 1 (a container healthcheck).",
    ),
]
RemoveUsersOption = Annotated[
    bool,
    typer.Option(
        "--remove-job-users",
        help="Start nothing: remove the job users (launchbay-job-N) and the directories root "
        "workers made on this host; refused while a job runs under one of them.",
    ),
]


@app.command()
def worker(
    queue: Annotated[
        list[str] | None, typer.Option("--queue", "-q", help="Queue to serve (repeatable).")
    ] = None,
    burst: Annotated[bool, typer.Option("--burst", help="Exit once the queues are empty.")] = False,
    gpus: GpusOption = None,
    slots: SlotsOption = None,
    pool: PoolOption = None,
    check: CheckOption = False,
    remove_job_users: RemoveUsersOption = False,
    max_age: Annotated[
        float | None,
        typer.Option("--max-age", min=0.1, help="With --check (default: 3 heartbeat intervals)."),
    ] = None,
) -> None:
    """Run a worker on the given queues (default: 'default').

    Its jobs may have as many ranks as it has GPUs, or CPU slots without any; GPUs are not
    shared with the other workers of its host (docs/deployment.md, "Placement and queues").
    """
    if check:
        _check_worker(max_age)
        return
    if remove_job_users:
        _remove_job_users()
        return
    from worker.devices import DevicesTaken, parse_gpu_ids
    from worker.reach import JobsCannotRun

    gpu_ids = None
    if gpus is not None:
        try:
            gpu_ids = parse_gpu_ids(gpus)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--gpus") from None
        if slots is not None:
            raise typer.BadParameter("give --gpus or --slots, not both", param_hint="--slots")
    from worker.rq_worker import run_worker

    try:
        run_worker(
            queues=queue or ["default"], burst=burst, gpus=gpu_ids, cpu_slots=slots, pool=pool
        )
    except (DevicesTaken, JobsCannotRun) as exc:
        err().print(f"error: {exc}")
        raise typer.Exit(EXIT_FAILED) from None


def _remove_job_users() -> None:
    import os

    from service.settings import get_settings
    from worker.job_user_pool import UsersInUse, remove_job_users

    if os.geteuid() != 0:
        err().print("error: only root removes users (sudo launchbay worker --remove-job-users)")
        raise typer.Exit(EXIT_FAILED)
    try:
        removed = remove_job_users(get_settings())
    except UsersInUse as exc:
        err().print(f"error: {exc}")
        raise typer.Exit(EXIT_FAILED) from None
    if not removed.users and not removed.directories:
        out().print("no job users or directories of root workers here: nothing to remove")
        return
    if removed.users:
        out().print(f"removed {len(removed.users)} job user(s): {', '.join(removed.users)}")
    for directory in removed.directories:
        out().print(f"removed {directory}")


def _check_worker(max_age: float | None) -> None:
    from client.health import check_worker_heartbeat
    from service.settings import get_settings

    ok, message = check_worker_heartbeat(get_settings(), max_age)
    if not ok:
        err().print(f"unhealthy: {message}")
        raise typer.Exit(EXIT_FAILED)
    out().print(message)


@app.command()
def reaper(
    interval: Annotated[
        float | None,
        typer.Option(
            "--interval", min=0.1, help="Seconds between passes (LAUNCHBAY_REAPER_INTERVAL_S)."
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Make one pass and exit.")] = False,
) -> None:
    """Fail or retry jobs whose worker was lost; enqueue again queued jobs Redis lost."""
    from service.reaper import run_reaper

    run_reaper(interval_s=interval, once=once)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the migrations to LAUNCHBAY_DATABASE_URL."""
    from service.db import upgrade_database
    from service.settings import get_settings

    upgrade_database(get_settings().resolved_database_url)


@storage_app.command("migrate")
def storage_migrate(
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="s3://bucket/prefix to copy into (default: LAUNCHBAY_ARTIFACT_STORE); the "
            "endpoint and credentials are LAUNCHBAY_S3_ENDPOINT_URL and AWS_*.",
        ),
    ] = None,
) -> None:
    """Copy the data dir's checkpoints and uploaded code into the object store; safe to stop
    and run again (what is there already is skipped; every copy is checked by sha256)."""
    from service.artifacts import open_store
    from service.db import make_engine
    from service.settings import get_settings
    from service.storage_migrate import migrate_to_store

    settings = get_settings()
    target = to or settings.artifact_store
    if not target.startswith("s3://"):
        err().print("error: give --to s3://bucket/prefix (or set LAUNCHBAY_ARTIFACT_STORE)")
        raise typer.Exit(EXIT_FAILED)
    store = open_store(settings.model_copy(update={"artifact_store": target}))
    engine = make_engine(settings.resolved_database_url)
    try:
        report = migrate_to_store(engine, settings.data_dir, store)
    finally:
        engine.dispose()
    out().print(f"storage migrate to {target}: {report.line()}")
    for line in report.missing:
        err().print(f"missing: {line}")
    for line in report.failed:
        err().print(f"failed: {line}")
    if report.failed:
        raise typer.Exit(EXIT_FAILED)
