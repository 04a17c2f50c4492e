"""Where chapter 6's results go, and the provenance each one carries.

Results go where every results file goes (`shared.benchmark.provenance.results_dir`): `$OUT` when
set (the GPU machine's device call sets it), else `results/cpu/` or `results/gpu/` by device.
Every file records the shared provenance (commit, machine, library versions, command), so a number
in the book can be traced back to the run that produced it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from shared.benchmark.provenance import REPO_ROOT as REPO  # noqa: F401  (the chapter's scripts import it here)
from shared.benchmark.provenance import provenance as shared_provenance
from shared.benchmark.provenance import results_dir
from shared.benchmark.provenance import write_json as shared_write_json


def out_dir(device: str) -> Path:
    """results/cpu or results/gpu by device ($OUT when set, as for every results file), created."""
    folder = results_dir(device)
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
    return shared_write_json({**data, "provenance": provenance(device)}, out_dir(device) / name)
