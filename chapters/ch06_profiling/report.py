"""Where chapter 6's results go, and the provenance each one carries.

CPU runs write to `results/cpu/`; GPU runs write to `$OUT` when the lead's device call sets it, else
to `results/gpu/`. Every file records the shared provenance (commit, machine, library versions, command),
so a number in the book can be traced back to the run that produced it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from shared.benchmark.provenance import provenance as shared_provenance

REPO = Path(__file__).resolve().parents[2]


def out_dir(device: str) -> Path:
    if str(device).startswith("cuda"):
        folder = Path(os.environ.get("OUT") or REPO / "results" / "gpu")
    else:
        folder = REPO / "results" / "cpu"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def provenance(device: str) -> dict[str, Any]:
    """The shared provenance (git state, machine, libraries, command, time), plus the GPU's size."""
    prov = shared_provenance()
    if str(device).startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        prov["machine"].update(gpu_memory_gib=round(props.total_memory / 2**30, 1),
                               gpu_sms=props.multi_processor_count)
    return prov


def write_json(name: str, data: dict[str, Any], device: str) -> Path:
    path = out_dir(device) / name
    payload = {**data, "provenance": provenance(device)}
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return path
