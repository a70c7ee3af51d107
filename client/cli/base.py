"""The `launchbay` app itself: global options, consoles, and how errors become exit statuses."""

import io
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO, cast

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from typer.core import TyperGroup

from client import render
from client.errors import (
    ApiError,
    CommandError,
    ConnectionFailed,
    Forbidden,
    LaunchbayClientError,
    PackError,
    Unauthorized,
)
from client.explain import describe_api_error
from client.sdk import Client
from client.specfile import SpecFileError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANCELLED = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130

EXIT_STATUS_HELP = (
    "Exit status: 0 ok; 1 the API refused the request, or a followed job failed; "
    "2 a followed job was cancelled, or a bad command line; 3 the API cannot be reached; "
    "130 interrupted."
)


@dataclass
class CliState:
    """What every command needs to reach the API; tests pass one with a fake transport."""

    api_url: str | None = None
    token: str | None = None
    transport: httpx.BaseTransport | None = None

    def client(self) -> Client:
        return Client(self.api_url, self.token, transport=self.transport)


def out() -> Console:
    """Standard output. Markup is off, so user text (`[bold]` in a log line or a job's name)
    prints as written; colour only on a terminal, never with NO_COLOR (rich reads both).
    Piped, no line ends in spaces (rich pads a table's cells to their column's width)."""
    return Console(
        file=trimmed(sys.stdout), markup=False, emoji=False, highlight=False, soft_wrap=True
    )


def err() -> Console:
    return Console(
        file=trimmed(sys.stderr), markup=False, emoji=False, highlight=False, soft_wrap=True
    )


# Spaces at the end of a line, before any colour codes that close it.
TRAILING_SPACES = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$")


class TrimmedLines(io.TextIOBase):
    """A text stream that writes each line to `stream` without its trailing spaces; a line
    not yet ended is written as it is when flushed (rich flushes after every print)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.pending = ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        if lines:
            self.stream.write("".join(TRAILING_SPACES.sub(r"\1", line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", None) or "utf-8"

    def fileno(self) -> int:
        return self.stream.fileno()


def trimmed(stream: TextIO) -> TextIO:
    """`stream` itself on a terminal (a live display redraws its lines), else trimmed."""
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    return stream if terminal else cast(TextIO, TrimmedLines(stream))


class LaunchbayGroup(TyperGroup):
    """Turns the client's errors into one line and an exit status, never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _quiet_broken_pipe()
        except ConnectionFailed as exc:
            fail(str(exc), EXIT_UNREACHABLE)
        except Unauthorized as exc:
            hint = "the token was refused" if state_of(ctx).token else "the API needs a token"
            fail(f"error {exc.code}: {exc.message} ({hint}: set LAUNCHBAY_TOKEN or pass --token)")
        except Forbidden as exc:
            hint = "" if "admin" in exc.message else " (this needs a token with the admin role)"
            fail(f"error {exc.code}: {exc.message}{hint}")
        except ApiError as exc:
            fail(describe_api_error(exc))
        except PackError as exc:
            fail(f"error {exc.code}: {exc.message}")
        except CommandError as exc:
            fail(f"error {exc.code}: {exc.message}", EXIT_CANCELLED)
        except (LaunchbayClientError, SpecFileError, OSError) as exc:
            fail(f"error: {exc}")
        except ValidationError as exc:
            fail(f"error: the API's answer does not match this client's records: {exc}")
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)


def _quiet_broken_pipe() -> NoReturn:
    """The reader went away (`launchbay metrics ID | head`): stop quietly, like `git log`.

    Standard output is pointed at /dev/null so the interpreter's last flush cannot fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # not a real file descriptor (tests): nothing left to flush
    finally:
        os.close(devnull)
    raise typer.Exit(EXIT_OK)


# rich_markup_mode=None: help is plain text (click's), so `[rank R]` in a help text stays,
# flags show no `<bool>`, and paragraphs wrap at the terminal's width.
app = typer.Typer(
    cls=LaunchbayGroup,
    help="Launchbay: run PyTorch DDP training jobs through a REST service.",
    epilog=EXIT_STATUS_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def sub_app(help_text: str) -> typer.Typer:
    return typer.Typer(help=help_text, no_args_is_help=True, rich_markup_mode=None)


code_app = sub_app("User code for jobs.")
token_app = sub_app("API tokens (admin only).")
db_app = sub_app("The service's database.")
app.add_typer(code_app, name="code")
app.add_typer(token_app, name="token")
app.add_typer(db_app, name="db")
storage_app = sub_app("Where checkpoints and uploaded code are kept.")
app.add_typer(storage_app, name="storage")


@app.callback()
def _global_options(
    ctx: typer.Context,
    api_url: str | None = typer.Option(
        None, "--api-url", envvar="LAUNCHBAY_API_URL", help="The API's base URL."
    ),
    token: str | None = typer.Option(
        None, "--token", envvar="LAUNCHBAY_TOKEN", help="Bearer token.", show_default=False
    ),
) -> None:
    state = ctx.ensure_object(CliState)
    state.api_url = api_url or state.api_url
    state.token = token or state.token


def state_of(ctx: typer.Context) -> CliState:
    return ctx.find_root().ensure_object(CliState)


def print_json(value: Any) -> None:
    typer.echo(render.to_json(render.plain(value)))


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    err().print(message, style="red")
    raise typer.Exit(code)
