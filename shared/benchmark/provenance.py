"""Where a number came from: the code (git commit, uncommitted changes), the machine, the library
versions, the exact command, and when. Every results file carries this, so a number in the book can
be traced to what produced it and a surprising one can be re-run."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "results"
LIBRARIES = ("torch", "transformers", "fastapi", "uvicorn", "requests", "triton", "numpy")


def git_state() -> dict[str, Any]:
    """The commit the code is at and whether the working tree differs from it.

    IFS_GIT_COMMIT (and IFS_GIT_DIRTY=1 if the tree had changes) wins when set: the command that
    sends the tree to the GPU machine sets it, because the copy there may carry no .git, or a stale
    one that names an older commit than the files it ran."""
    if commit := os.environ.get("IFS_GIT_COMMIT"):
        return {"commit": commit, "dirty": os.environ.get("IFS_GIT_DIRTY") == "1"}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        # Only tracked files count: someone's untracked scratch file does not change our code.
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        return {"commit": git("rev-parse", "HEAD"), "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: on a shared machine, the noise a reader must know about."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": load_average(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["gpu_count"] = torch.cuda.device_count()
        info["cuda"] = torch.version.cuda
    return info


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def provenance(notes: str = "") -> dict[str, Any]:
    """Everything about this run except the model (which the engine reports)."""
    out = {
        "git": git_state(),
        "machine": machine(),
        "libraries": library_versions(),
        # orig_argv keeps `-m shared.tour` as typed (argv[0] would be the module's file path).
        "command": shlex.join([Path(sys.orig_argv[0]).name, *sys.orig_argv[1:]]),
        "cwd": os.getcwd(),
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if notes:
        out["notes"] = notes
    return out


def results_dir(device: str | None = None) -> Path:
    """$OUT if set (the GPU machine collects files from there), else results/cpu or results/gpu."""
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"])
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return RESULTS_DIR / ("gpu" if str(device).startswith("cuda") else "cpu")


def write_json(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return path


def save_results(
    name: str,
    body: dict[str, Any],
    device: str | None = None,
    model: dict[str, Any] | None = None,
    notes: str = "",
    out_dir: str | os.PathLike[str] | None = None,
    started: dict[str, Any] | None = None,
) -> Path:
    """Write `<out_dir or results_dir(device)>/<name>.json`: provenance, the model's manifest and
    its sha256, then `body`. `started` is the provenance taken when the benchmark began (its load
    average is the one that matters); the load average at the end is added."""
    prov = started or provenance(notes)
    if notes:
        prov["notes"] = notes
    prov["machine"]["load_average_end"] = load_average()
    data = {"name": name, "provenance": prov, "model": model or {}, **body}
    return write_json(data, Path(out_dir or results_dir(device)) / f"{name}.json")
