"""Real services for the tests: private Redis and PostgreSQL, and Launchbay's own processes."""
