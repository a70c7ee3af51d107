"""All-reduce known tensors on every rank and check the sums (a GPU check's program, run as a
job's uploaded code under torchrun): NCCL on CUDA, gloo without.

Each rank contributes rank + 1, so every element of the sum is world * (world + 1) / 2. A
small tensor first, then a large one (`--mib`), reduced `--iters` times and timed. Rank 0
prints the result and writes it as a metric line to $LAUNCHBAY_EVENTS_FILE; a wrong sum on
any rank exits 1.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    expected = world * (world + 1) / 2
    small = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(small)
    big = torch.empty(args.mib * 2**20 // 4, device=device)
    seconds = []
    for _ in range(args.iters + 1):  # the first one warms up
        big.fill_(float(rank + 1))
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        dist.all_reduce(big)
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    ok = bool((small == expected).all()) and bool((big == expected).all())
    took = sorted(seconds[1:])[len(seconds[1:]) // 2]
    algbw = args.mib * 2**20 / took / 1e9
    busbw = algbw * 2 * (world - 1) / world
    line = (
        f"all_reduce: world {world}, backend {dist.get_backend()}, rank {rank} sum "
        f"{'ok' if ok else 'WRONG'} (expected {expected:g}, got {small[0].item():g} and "
        f"{big[0].item():g}); {args.mib} MiB in {took * 1000:.2f} ms (median of {args.iters}), "
        f"algbw {algbw:.1f} GB/s, busbw {busbw:.1f} GB/s"
    )
    print(line, flush=True)
    if rank == 0 and os.environ.get("LAUNCHBAY_EVENTS_FILE"):
        metrics = {"sum_ok": float(ok), "ms": took * 1000, "algbw_gbs": algbw, "busbw_gbs": busbw}
        with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
            events.write(json.dumps({"type": "metric", "step": 1, "metrics": metrics}) + "\n")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
