"""Says which GPUs each rank was given: the variables that choose them, as the rank sees them."""

import json
import os

names = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)
print("gpu-env " + json.dumps({name: os.environ.get(name) for name in names}), flush=True)
