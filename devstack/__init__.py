"""Real processes for the tests and the benchmarks: a Launchbay stack (`launchbay api` and
workers), a private Redis, a throwaway PostgreSQL, and the helpers that start, find and stop
them. Not a test module, so `bench/` can use it without importing `tests/`."""
