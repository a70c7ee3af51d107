"""The Launchbay HTTP service (FastAPI) and the persistence it shares with the worker."""
