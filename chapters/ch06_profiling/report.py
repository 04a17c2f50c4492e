"""Where chapter 6's results go, and the provenance each one carries.

CPU runs write to `results/cpu/`; GPU runs write to `$OUT` when the lead's device call sets it, else
to `results/gpu/`. Every file records the commit, the machine, the library versions and the command,
so a number in the book can be traced back to the run that produced it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]


def out_dir(device: str) -> Path:
    if str(device).startswith("cuda"):
        folder = Path(os.environ.get("OUT") or REPO / "results" / "gpu")
    else:
        folder = REPO / "results" / "cpu"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"  # the device machine gets a copy of the tree, not always its .git


def machine(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        # Other people share this machine's cores; the load average says how much while we ran.
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    if str(device).startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    gpu_sms=props.multi_processor_count)
    return info


def provenance(device: str) -> dict[str, Any]:
    import transformers

    return {
        "git_commit": _git_commit(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(device),
        "libraries": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "cuda": torch.version.cuda or "",
        },
    }


def write_json(name: str, data: dict[str, Any], device: str) -> Path:
    path = out_dir(device) / name
    payload = {**data, "provenance": provenance(device)}
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return path
