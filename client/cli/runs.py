"""`launchbay run` (the program in the current directory, as its author runs it) and
`launchbay artifacts` (the files a job kept)."""

from pathlib import Path
from typing import Annotated

import typer

from client import render
from client.cli.base import EXIT_INTERRUPTED, app, err, fail, out, print_json, state_of
from client.cli.jobs import JobId, JsonFlag, say_warnings
from client.errors import CommandError
from client.models import UploadedDirectory
from client.specfile import load_spec
from client.watch import describe_end, exit_code_for, follow_job

SHOWN_SKIPPED = 10
# Everything after `run`'s own options is the command, `--` or not: its flags are the program's.
COMMAND_SETTINGS = {"allow_interspersed_args": False, "ignore_unknown_options": True}


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CommandError(f"--env takes NAME=VALUE, not {pair!r}")
        env[name] = value
    return env


def report_upload(code: UploadedDirectory) -> None:
    sent = "uploaded" if code.uploaded else "unchanged since uploaded"
    console = err()
    console.print(
        f"packed {len(code.files)} files ({code.size} bytes) as code {code.code_id[:12]}: {sent}"
    )
    for path, why in code.skipped[:SHOWN_SKIPPED]:
        console.print(f"  left out {path!r}: {why}")
    if len(code.skipped) > SHOWN_SKIPPED:
        console.print(f"  left out {len(code.skipped) - SHOWN_SKIPPED} more")


@app.command(context_settings=COMMAND_SETTINGS)
def run(
    ctx: typer.Context,
    command: Annotated[
        list[str],
        typer.Argument(
            help="The program, as you run it: python train.py ARGS, train.py ARGS, or "
            "torchrun [--nproc-per-node N] [--nnodes N] train.py ARGS.",
            metavar="COMMAND",
            show_default=False,
        ),
    ],
    nproc_per_node: Annotated[
        int | None, typer.Option("--nproc-per-node", min=1, help="Ranks per node (default 1).")
    ] = None,
    nnodes: Annotated[int | None, typer.Option("--nnodes", min=1, help="Nodes.")] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="The queue to run on.")] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", help="NAME=VALUE for every rank (repeatable).")
    ] = None,
    spec_file: Annotated[
        Path | None,
        typer.Option("-f", "--file", help="A job spec (YAML or JSON) for the other fields."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the finished job as JSON only.")
    ] = False,
) -> None:
    """Run the program in the current directory as a job, and follow it to its end: the
    directory is packed (honouring .gitignore and .launchbayignore; links are not followed),
    uploaded unless its bytes were before, and submitted. Exit status as 'submit --wait':
    0 succeeded, 1 failed, 2 cancelled or a bad command line."""
    base = load_spec(spec_file) if spec_file is not None else None
    with state_of(ctx).client() as lb:
        job = lb.run_program(
            command,
            Path.cwd(),
            spec=base,
            nproc_per_node=nproc_per_node,
            nnodes=nnodes,
            queue=queue,
            env=parse_env(env or []),
            on_upload=None if as_json else report_upload,
        )
        say_warnings(job.warnings)
        if as_json:
            job = lb.wait_for_job(job.id)
            print_json(job)
        else:
            console = out()
            err().print(f"submitted job {job.id} ({job.name})")
            try:
                job = follow_job(lb, job.id, console)
            except KeyboardInterrupt:
                fail(f"stopped following; job {job.id} goes on", EXIT_INTERRUPTED)
            console.print(describe_end(job))
    raise typer.Exit(exit_code_for(job))


@app.command()
def artifacts(
    ctx: typer.Context,
    job_id: JobId,
    path: Annotated[
        str | None,
        typer.Argument(
            help="Download this artifact (or those under this directory).", show_default=False
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Directory to download into (default: .); alone, downloads every artifact.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the files a job kept; with PATH or -o, download them as DEST/<path>, never
    outside DEST."""
    with state_of(ctx).client() as lb:
        if path is None and output is None:
            page = lb.list_artifacts(job_id)
            if as_json:
                print_json(page)
                return
            items = render.plain(page.items)
            out().print(render.records_table(items, ["path", "size", "modified_at"]))
            if page.truncated:
                out().print(f"(the first {len(items)} listed: the job kept more)")
            return
        saved = lb.download_artifacts(job_id, path, output or Path("."))
    if as_json:
        print_json([str(target) for target in saved])
        return
    if not saved:
        out().print(f"job {job_id} kept no artifacts")
    for target in saved:
        out().print(f"saved {target}")
