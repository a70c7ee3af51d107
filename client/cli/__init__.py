"""The `launchbay` command line.

Client commands talk to the API through `client.sdk.Client` (`--api-url`/`LAUNCHBAY_API_URL`,
`--token`/`LAUNCHBAY_TOKEN`). Wherever one takes a job, it takes its id, a unique prefix of it
(4+ characters), its name or `name@N`: the API resolves them. Server commands (`api`,
`worker`, `reaper`, `db upgrade`) import the service and the worker only when run.

    base.py     the app, consoles (no markup, colour only on a terminal, NO_COLOR), errors
    jobs.py     submit, list, status, watch, logs, metrics, checkpoints, cancel, delete, download
    admin.py    code upload|list|rm, recipes, nodes, workers, token create|list|revoke
    review.py   compare, rerun
    runs.py     run (the current directory's program, as its author runs it), artifacts
    ops.py      webhook add|list|rm|deliveries|redeliver, stacks, audit
    goodput.py  goodput (one job's ledger, or many jobs' summed up)
    server.py   api, worker (and worker --check), reaper, db upgrade, storage migrate

Exit status: 0 ok; 1 the API refused (`error <code>: <message>`) or a followed job failed;
2 a followed job was cancelled (also click's status for a bad command line); 3 the API
cannot be reached; 130 interrupted. Output cut short by its reader (`| head`) ends quietly, 0.
"""

from client.cli import admin, goodput, jobs, ops, review, runs, server
from client.cli.base import CliState, app

__all__ = [
    "CliState",
    "admin",
    "app",
    "goodput",
    "jobs",
    "main",
    "ops",
    "review",
    "runs",
    "server",
]


def main() -> None:
    app()
