"""`python -m bench [NAME ...] [--write PATH]`: run the benchmarks and print the table."""

import argparse
import importlib
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import TABLE_HEADER, Result
from bench.job_users import private_job_users

BENCHMARKS = {
    "training": "bench.p1_p2_training",
    "interleaved": "bench.p1_interleaved",
    "api": "bench.p3_api",
    "metrics": "bench.p4_metrics",
    "download": "bench.p5_download",
    "queue": "bench.p6_queue",
    "gpu": "bench.p7_gpu",
    "environment": "bench.p8_environment",
    "logsearch": "bench.p9_log_search",
    "logsearch-sqlite": "bench.p9_log_search_sqlite",
    "store": "bench.p9_store",
    "scheduling": "bench.p9_scheduling",
    "streams": "bench.p9_streams",
    "history": "bench.p9_history",
    "slurm": "bench.p9_slurm",
    "chaos": "bench.r12_chaos",
    "workdir": "bench.p10_workdir",
    "demo": "bench.d1_demo",
    "walk": "bench.newcomer_walk",
    "capture": "bench.p13_capture",
    "chartpan": "bench.f10_chart_pan",
    "warm": "bench.p2_warm",
    "goodput": "bench.g1_goodput",
    "gpusampler": "bench.p14_gpu_sampler",
}


def machine_line() -> str:
    import os

    import torch

    return (
        f"{platform.node()}: {os.cpu_count()} CPU cores, {platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}"
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="training: P1 alone, in rounds of thousands of steps (P1L; 4.5 minutes, 7 with Ray)",
    )
    parser.add_argument("--write", type=Path, help="also write the table to this markdown file")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    results: list[Result] = []
    started = time.monotonic()
    with private_job_users():
        for name in args.names or list(BENCHMARKS):
            module = importlib.import_module(BENCHMARKS[name])
            print(f"bench: running {name} ...", file=sys.stderr, flush=True)
            began = time.monotonic()
            long = args.long and name == "training"
            results.extend(module.run(long=True) if long else module.run())
            took = time.monotonic() - began
            print(f"bench: {name} took {took:.0f} s", file=sys.stderr, flush=True)
    table = "\n".join([TABLE_HEADER, *(r.row() for r in results)])
    header = (
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine_line()}; "
        f"`python -m bench {' '.join(args.names)}{' --long' if args.long else ''}`, "
        f"{time.monotonic() - started:.0f} s."
    )
    print(header)
    print(table)
    if args.write:
        args.write.write_text(f"{header}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
