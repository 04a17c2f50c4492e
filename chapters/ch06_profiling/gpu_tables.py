"""The GPU tables for chapters 1–6, in one device call: every finished chapter's offline benchmark
(its own 06_benchmark_offline.py, through the shared harness), the online benchmark for chapters 1,
4 and 5 where their servers exist, and the tour. Each runs as its own process under a time budget
(a failure or a timeout is recorded, and the rest still runs); their JSON files are combined into
one, $OUT/gpu_tables.json (results/gpu/ when OUT is unset), with each command, exit status, time and
output tail as provenance.

    python chapters/ch06_profiling/gpu_tables.py [--budget-s 450] [--tokens 256] [--online-tokens 64]
                                                 [--only ch04 online]   # labels containing any
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import importlib.util
import json
import os
import subprocess
import tempfile
import time
from typing import Any

from chapters.ch06_profiling.report import REPO, out_dir, provenance

OFFLINE = ["ch01_baseline", "ch02_generate_loop", "ch03_model", "ch04_kv_cache",
           "ch05_static_batching", "ch06_profiling"]
ONLINE = ["ch01_baseline", "ch04_kv_cache", "ch05_static_batching"]


def jobs(tokens: int, online_tokens: int, tmp: Path,
         only: list[str] | None = None) -> list[tuple[str, list[str]]]:
    """(label, argv) for every benchmark that exists in this checkout, in chapter order; with
    `only`, those whose label contains one of its words."""
    py, out = sys.executable, ["--out", str(tmp)]
    found = []
    for chapter in OFFLINE:
        script = REPO / "chapters" / chapter / "06_benchmark_offline.py"
        if script.is_file():
            found.append((f"{chapter}/offline", [py, str(script), "--tokens", str(tokens), *out]))
    for chapter in ONLINE:
        script = REPO / "chapters" / chapter / "06_benchmark_online.py"
        if script.is_file() and (script.parent / "05_server.py").is_file():
            found.append((f"{chapter}/online", [py, str(script), "--num-requests", "8",
                                                "--tokens", str(online_tokens), *out]))
    found.append(("tour", [py, "-m", "shared.tour", "--tokens", str(tokens), *out]))
    chosen = [(label, argv) for label, argv in found if not only or any(w in label for w in only)]
    if not chosen:
        raise ValueError(f"--only {only} matches none of {[label for label, _ in found]}")
    return chosen


def run_all(budget_s: float, jobs_to_run: list[tuple[str, list[str]]],
            job_timeout_s: float, tmp: Path) -> dict[str, Any]:
    """Run each job in turn, writing into `tmp`, and collect the JSON files each one wrote."""
    missing = [m for m in ("requests", "tqdm") if importlib.util.find_spec(m) is None]
    runs: list[dict[str, Any]] = []
    results: dict[str, Any] = {}
    deadline = time.monotonic() + budget_s
    for label, argv in jobs_to_run:
        left = deadline - time.monotonic()
        record: dict[str, Any] = {"label": label, "command": " ".join(argv[1:])}
        if left < 20:
            record["skipped"] = "time budget spent"
            runs.append(record)
            continue
        before = set(tmp.glob("*.json"))
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True,
                                  timeout=min(left, job_timeout_s),
                                  env={**os.environ, "OUT": str(tmp), "PYTHONPATH": python_path()})
            record.update(returncode=proc.returncode, tail=(proc.stdout + proc.stderr)[-2500:])
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"") + (exc.stderr or b"")
            text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
            record.update(returncode=None, timed_out=True, tail=text[-2500:])
        record["seconds"] = round(time.monotonic() - t0, 1)
        for path in sorted(set(tmp.glob("*.json")) - before):
            results[path.stem] = json.loads(path.read_text())
            record.setdefault("files", []).append(path.name)
        runs.append(record)
        print(f"{label:<32} rc={record.get('returncode')} {record['seconds']:>6}s "
              f"{record.get('files', [])}", flush=True)
    return {"missing_modules": missing, "runs": runs, "results": results}


def python_path() -> str:
    """The repository first, then whatever PYTHONPATH already holds (on the GPU machine, the
    carried wheels: without them the servers' uvicorn is missing)."""
    return os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)


def summary_rows(doc: dict[str, Any]) -> list[str]:
    """One line per offline result file: each engine's mean tokens/s over the runs."""
    lines = []
    for name, body in doc["results"].items():
        cells = []
        for e in body.get("engines", []):
            mean = e.get("summary", {}).get("run_tokens_per_second", {}).get("mean")
            if isinstance(mean, (int, float)):
                cells.append(f"{e['label']} {mean:.1f} tok/s")
        lines.append(f"  {name:<28} {', '.join(cells)[:110]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=450.0)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--online-tokens", type=int, default=64,
                        help="new tokens per online request (16 requests per online benchmark)")
    parser.add_argument("--job-timeout-s", type=float, default=150.0)
    parser.add_argument("--only", nargs="+", default=None,
                        help="run only the benchmarks whose label contains one of these")
    parser.add_argument("--name", default="gpu_tables", help="results file name, without .json")
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    args = parser.parse_args()
    try:
        jobs(args.tokens, args.online_tokens, Path("$TMP"), args.only)  # fail before any run
    except ValueError as exc:
        parser.error(str(exc))
    if args.list:
        for label, argv in jobs(args.tokens, args.online_tokens, Path("$TMP"), args.only):
            print(f"{label:<32} {' '.join(argv[1:])}")
        return
    with tempfile.TemporaryDirectory() as tmp_name:
        planned = jobs(args.tokens, args.online_tokens, Path(tmp_name), args.only)
        doc = run_all(args.budget_s, planned, args.job_timeout_s, Path(tmp_name))
    doc["provenance"] = provenance("cuda" if _cuda() else "cpu")
    path = out_dir("cuda" if _cuda() else "cpu") / f"{args.name}.json"
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"\nwrote {path}")
    if doc["missing_modules"]:
        print(f"missing modules on this machine: {doc['missing_modules']} (the harness needs them)")
    print(f"{'benchmark':<32}{'rc':>5}{'seconds':>9}  files")
    for r in doc["runs"]:
        print(f"{r['label']:<32}{str(r.get('returncode', r.get('skipped', ''))):>5}"
              f"{r.get('seconds', 0):>9}  {','.join(r.get('files', []))}")
    print("\n".join(summary_rows(doc)))


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
