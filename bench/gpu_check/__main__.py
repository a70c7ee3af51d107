"""`python -m bench.gpu_check [--cpu] [--quick] [--out DIR]`: the checks, in order, on a private
stack; the report in DIR (report.json, report.md, the stack's logs). Exit 0 when no check
failed. `scripts/gpu-check.sh` sets up its environment and runs this."""

import argparse
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.gpu_check import checks_devices, checks_faults, checks_training
from bench.gpu_check.report import Row, failed, not_run, verdict, write_report
from bench.gpu_check.session import (
    Session,
    describe_machine,
    find_target,
    interpreter_problem,
    leftover_processes,
    running_session,
)

Check = Callable[[Session], Row | list[Row]]
# In the order they run: the quick ones that prove the path first, the long measurements last.
CHECKS: list[tuple[tuple[str, ...], Check]] = [
    (("device_probe",), checks_devices.check_device_probe),
    (("mig",), checks_devices.check_mig),
    (("worker_refusal",), checks_devices.check_refusal),
    (("nccl_smoke",), checks_training.check_nccl_smoke),
    (("all_reduce",), checks_training.check_all_reduce),
    (("gpu_sampler",), checks_devices.check_gpu_sampler),
    (("cuda_oom",), checks_faults.check_cuda_oom),
    (("cancel",), checks_faults.check_cancel),
    (("hang",), checks_faults.check_hang),
    (("checkpoint_stall", "checkpoint_loads_on_cpu"), checks_training.check_checkpoints),
    (("scaling",), checks_training.check_scaling),
    (
        ("recipe_synthetic", "recipe_digits", "recipe_text", "gpu_utilisation"),
        checks_training.check_recipes,
    ),
]
# Checks stop starting this long before the budget ends: the longest one and the teardown fit.
RESERVE_S = 90


def run_checks(session: Session) -> list[Row]:
    rows: list[Row] = []
    for names, check in CHECKS:
        if session.time_left() < RESERVE_S:
            rows += [not_run(name, "out of time: the check's budget was spent") for name in names]
            continue
        began = time.monotonic()
        try:
            found = check(session)
        except Exception as exc:  # noqa: BLE001 - a broken check is a failed row, not the end
            detail = "".join(traceback.format_exception_only(exc)).strip()
            rows.append(failed(names[0], f"{detail}\n{traceback.format_exc()[-1500:]}"))
            continue
        found = found if isinstance(found, list) else [found]
        rows += found
        for row in found:
            print(f"gpu-check: {row.check}: {row.status} ({time.monotonic() - began:.0f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__)
    parser.add_argument("--cpu", action="store_true", help="gloo on 2 CPU ranks, no CUDA")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter jobs (CI)")
    parser.add_argument("--out", type=Path, default=Path("gpu-check"))
    parser.add_argument("--budget-s", type=float, default=450, help="when checks stop starting")
    args = parser.parse_args(argv)
    started = time.monotonic()
    problem = interpreter_problem()
    if problem is not None:
        raise SystemExit(f"gpu-check: the job users cannot run this Python: {problem}")
    target = find_target(args.cpu)
    machine = describe_machine(target)
    print(f"gpu-check: {machine}", file=sys.stderr, flush=True)
    marker = f"gpu-check-{uuid.uuid4().hex}"
    with running_session(target, args.quick, args.budget_s, marker, args.out / "logs") as session:
        rows = [checks_devices.check_machine(session, machine), *run_checks(session)]
    left = leftover_processes(marker)
    rows.append(
        verdict("teardown", not left, len(left), "processes left", "\n".join(left) or "none")
    )
    took = time.monotonic() - started
    write_report(args.out, rows, machine, took)
    print((args.out / "report.md").read_text())
    return 1 if any(r.status == "fail" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
