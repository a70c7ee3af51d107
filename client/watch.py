"""`launchbay watch`: a live view of one job, fed by its event stream, until the job ends.

It opens with the job's last log lines (`GET …/logs?order=desc`) and follows the stream from
the seq they were read at, so it opens as fast for a long job as for a new one.

If the stream cannot be had (an old proxy, a broken connection that will not come back), the
view falls back to polling the job and its logs. When the output is not a terminal (CI logs, a
pipe), state changes and log lines are printed one per line instead of a live display.
"""

import threading
import time
from collections import deque
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.text import Text

from client.errors import ApiError, ConnectionFailed
from client.models import Event, Job
from client.render import STATE_STYLES, format_eta, format_log, format_number, state_text
from client.sdk import Client

EXIT_CODES = {"succeeded": 0, "failed": 1, "cancelled": 2}
"""How `watch` and `submit --wait` exit for each terminal state."""

LOG_LINES = 8
# How often a followed job is read again while its events come (its `progress.eta_s`).
JOB_REFRESH_S = 10.0
# Launchbay's own metrics (jobs/contract/system_metrics.py): charts, not the job's values.
SYSTEM_PREFIX = "system/"


def exit_code_for(job: Job) -> int:
    return EXIT_CODES.get(str(job.state), 1)


def describe_end(job: Job) -> Text:
    """`job 1f3a… failed (user_error): Traceback…` for the line printed when a job ends."""
    state = str(job.state)
    text = Text(f"job {job.id} ") + Text(state, style=STATE_STYLES.get(state, ""))
    if job.exit_reason:
        text.append(f" ({job.exit_reason})")
    if job.message:
        text.append(f": {job.message}")
    for warning in job.warnings:
        text.append(f"\nwarning: {warning}", style="yellow")
    return text


def eta_of(job: dict[str, Any]) -> tuple[float, float] | None:
    """(the job's `progress.eta_s`, now on the monotonic clock), or None when it has none."""
    eta_s = (job.get("progress") or {}).get("eta_s")
    return None if eta_s is None else (float(eta_s), time.monotonic())


class JobView:
    """What the live display shows. Updated by the follower, drawn by rich's refresh thread."""

    def __init__(self, job: dict[str, Any], echo: Console | None = None) -> None:
        self._lock = threading.Lock()
        self._echo = echo
        self.job = job
        self.last_seq = 0
        self.lines: deque[str] = deque(maxlen=LOG_LINES)
        self.checkpoint: str | None = None
        # The job's `progress.eta_s` and when it was read (monotonic): counted down between reads.
        self.eta = eta_of(job)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[left]}", style="dim"),
        )
        self._task = self.progress.add_task("step", total=None, left="")
        self._sync_progress()

    def apply(self, event: Event) -> None:
        data = event.data if isinstance(event.data, dict) else {}
        with self._lock:
            if event.id and event.id.isdigit():
                self.last_seq = int(event.id)
            if event.event == "state":
                self.job.update({k: v for k, v in data.items() if k in self.job or k == "state"})
                self._add_line(f"(state {data.get('state')})", shown_live=False)
            elif event.event == "metric":
                self._apply_metric(data)
            elif event.event == "log":
                self._add_line(format_log(data, with_rank=True))
            elif event.event == "checkpoint":
                # Shown above the logs until the next one, so busy logs cannot scroll it away.
                self.checkpoint = f"checkpoint {data.get('id')} saved at step {data.get('step')}"
                self._add_line(f"({self.checkpoint})", shown_live=False)
            elif event.event == "restart":
                self._add_line("(ranks restarted)")
            self._sync_progress()

    def replace_job(self, job: dict[str, Any]) -> None:
        with self._lock:
            self.job, self.eta = job, eta_of(job)
            self._sync_progress()

    def time_left(self, now: float | None = None) -> str:
        """`time left 3m20s` at the job's recent rate (the API's estimate), or ``."""
        if self.eta is None or self.job.get("state") != "running":
            return ""
        eta_s, read_at = self.eta
        since = (time.monotonic() if now is None else now) - read_at
        return f"time left {format_eta(max(0.0, eta_s - since))}"

    def add_log(self, item: dict[str, Any]) -> None:
        with self._lock:
            self.last_seq = max(self.last_seq, int(item.get("seq") or 0))
            self._add_line(format_log(item, with_rank=True))

    def note(self, line: str) -> None:
        with self._lock:
            self._add_line(f"({line})")

    def render(self) -> RenderableType:
        with self._lock:
            job = self.job
            # One line, cut with an ellipsis at the width (a long worker name goes first).
            header = Text.assemble(
                ("job ", "bold"),
                (str(job.get("id")), "bold"),
                f"  {job.get('name', '')}  ",
                state_text(job.get("state")),
                f"  attempt {job.get('attempt', 1)}",
                f"  on {job['worker']}" if job.get("worker") else "",
            )
            header.no_wrap, header.overflow = True, "ellipsis"
            metrics = Text(
                "  ".join(
                    f"{name} {format_number(value)}"
                    for name, value in sorted((job.get("latest_metrics") or {}).items())
                )
                or "no metrics yet",
                style="dim" if not job.get("latest_metrics") else "",
            )
            if job.get("state") == "queued" and job.get("pending_reason"):
                header.append(f"  #{job.get('queue_position')}: {job['pending_reason']}")
            logs = Panel(Text("\n".join(self.lines) or "no logs yet"), title="logs", expand=True)
            saved = Text(f"last {self.checkpoint}" if self.checkpoint else "no checkpoint yet")
            saved.stylize("dim" if not self.checkpoint else "green")
            warned = [Text(f"warning: {w}", style="yellow") for w in job.get("warnings") or []]
            self.progress.update(self._task, left=self.time_left())
            return Group(header, self.progress, metrics, saved, *warned, logs)

    def _add_line(self, line: str, shown_live: bool = True) -> None:
        if self._echo is not None:
            self._echo.print(line, markup=False, highlight=False, soft_wrap=True)
        elif shown_live:
            self.lines.append(line)

    def _apply_metric(self, data: dict[str, Any]) -> None:
        if str(data.get("name", "")).startswith(SYSTEM_PREFIX):
            return
        latest = self.job.setdefault("latest_metrics", {})
        if isinstance(data.get("metrics"), dict):
            latest.update(data["metrics"])
        elif "name" in data:
            latest[data["name"]] = data.get("value")
        progress = self.job.setdefault("progress", {})
        for key in ("step", "epoch"):
            if data.get(key) is not None:
                progress[key] = max(progress.get(key) or 0, data[key])

    def _sync_progress(self) -> None:
        progress = self.job.get("progress") or {}
        epochs = ((self.job.get("spec") or {}).get("config") or {}).get("epochs")
        if progress.get("total_steps"):
            unit, total, done = "step", progress["total_steps"], progress.get("step")
        elif isinstance(epochs, int) and epochs > 0:
            unit, total, done = "epoch", epochs, progress.get("epoch")
        else:
            unit, total, done = "step", None, progress.get("step")
        self.progress.update(
            self._task, description=unit, total=total, completed=done or 0, left=self.time_left()
        )


def follow_job(client: Client, job_id: str, console: Console, poll_s: float = 1.0) -> Job:
    """Show the job live until it reaches a terminal state, and return it as it ended."""
    job = client.get_job(job_id)
    if job.is_terminal():
        return job
    job_id = job.id  # a prefix or a name resolved once: `name@1` stays this job
    view = JobView(job.model_dump(mode="json"), echo=None if console.is_terminal else console)
    display: AbstractContextManager[Any] = (
        Live(get_renderable=view.render, console=console, refresh_per_second=4)
        if console.is_terminal
        else nullcontext()
    )
    with display:
        try:
            read_at = time.monotonic()
            for event in client.stream_events(job_id, str(show_tail(client, job_id, view))):
                view.apply(event)
                if event.event == "state" or time.monotonic() - read_at >= JOB_REFRESH_S:
                    view.replace_job(client.get_job(job_id).model_dump(mode="json"))
                    read_at = time.monotonic()
        except (ConnectionFailed, ApiError) as exc:
            view.note(f"event stream lost: {exc}; polling instead")
            _poll(client, job_id, view, poll_s)
    return client.get_job(job_id)


def show_tail(client: Client, job_id: str, view: JobView) -> int:
    """Show the job's last log lines and return the seq to follow its events from: what the
    job wrote before is not replayed (a long job's history would take minutes)."""
    tail = client.list_logs(job_id, limit=LOG_LINES, order="desc")
    for item in reversed(tail.items):
        view.add_log(item.model_dump(mode="json"))
    return tail.next_after


def _poll(client: Client, job_id: str, view: JobView, poll_s: float) -> None:
    while True:
        job = client.get_job(job_id)
        view.replace_job(job.model_dump(mode="json"))
        for item in client.iter_logs(job_id, after=view.last_seq):
            view.add_log(item.model_dump(mode="json"))
        if job.is_terminal():
            return
        time.sleep(poll_s)
