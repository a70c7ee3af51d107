"""A short database write of the worker, tried again through a brief outage of the database."""

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)

T = TypeVar("T")


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
