"""A short database write of the worker, tried again through an outage of the database."""

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)

T = TypeVar("T")

# The longest pause between two tries of `retry_db_for`.
MAX_DELAY_S = 10.0


def retry_db(action: Callable[[], T], what: str, tries: int = 5, delay_s: float = 1.0) -> T | None:
    """`action()`, tried up to `tries` times while it raises a database error; None when
    every try failed (each failure is logged as `what`)."""
    for i in range(tries):
        try:
            return action()
        except SQLAlchemyError:
            log.warning("%s failed (try %d of %d)", what, i + 1, tries, exc_info=True)
            time.sleep(delay_s)
    return None


def retry_db_for(
    action: Callable[[], T], what: str, seconds: float, delay_s: float = 1.0
) -> tuple[bool, T | None]:
    """`action()`, tried while it raises a database error until `seconds` have passed, the
    pause doubling from `delay_s` up to `MAX_DELAY_S`: (True, its result), or (False, None)
    when the database never took it."""
    deadline = time.monotonic() + seconds
    tries = 0
    while True:
        tries += 1
        try:
            return True, action()
        except SQLAlchemyError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                log.error("%s failed %d times; given up: %s", what, tries, _said(exc))
                return False, None
            log.warning("%s failed (try %d; trying again): %s", what, tries, _said(exc))
            time.sleep(min(delay_s, left))
            delay_s = min(delay_s * 2, MAX_DELAY_S)


def _said(exc: SQLAlchemyError) -> str:
    """The driver's first line, without the statement and parameters SQLAlchemy adds."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
