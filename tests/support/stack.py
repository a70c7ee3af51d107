"""Moved to `devstack.stack`, which the benchmarks share; the tests keep importing it here."""

from devstack.stack import LAUNCHBAY, Stack

__all__ = ["LAUNCHBAY", "Stack"]
