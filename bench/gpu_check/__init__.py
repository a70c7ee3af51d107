"""`scripts/gpu-check.sh`: one prepared command that proves the CUDA and NCCL path on a GPU host
(or, with `--cpu`, the same harness with gloo on CPU), and writes `gpu-check/report.json` and
`gpu-check/report.md`: one row per check (docs/gpu-check.md)."""
