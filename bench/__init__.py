"""Benchmarks: each goal measured as a ratio against a baseline run side by side."""
