"""Count, predict and measure every op of a decode step and a prefill; sweep prompt length and batch
size; plot the roofline. Reads the ceilings from 00_ceilings.py's JSON (measures them if missing).
Writes results/cpu/ch06_roofline.json and three plots next to it.

    python chapters/ch06_profiling/01_roofline.py [--threads N]
"""

from __future__ import annotations

import argparse
import json

from chapters.ch06_profiling import ceilings, plots, roofline
from chapters.ch06_profiling.report import out_dir, write_json
from shared.model import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (see 00_ceilings.py)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs")
    args = parser.parse_args()
    device = "cpu"
    ceilings.pin_threads(device, args.threads)
    path = out_dir(device) / "ch06_ceilings.json"
    measured = json.loads(path.read_text()) if path.is_file() else None
    if measured is None or measured["load"]["torch_threads"] != args.threads:
        print(f"measuring ceilings with {args.threads} thread(s) (none saved for that count)")
        measured = ceilings.measure(device)
    loaded = load_model(device=device)
    result = roofline.experiment(loaded.model, measured, device, quick=args.quick)
    result["model_manifest_sha256"] = loaded.manifest_sha256
    folder = out_dir(device)
    drawn = [plots.roofline(result, folder / "ch06_roofline.png"),
             plots.by_length(result, folder / "ch06_prefill_vs_decode.png"),
             plots.by_batch(result, folder / "ch06_decode_by_batch.png")]
    result["plots"] = [p.name for p in drawn if p is not None]
    if not args.quick:
        print(f"wrote {write_json('ch06_roofline.json', result, device)} and {result['plots']}")
    d, p = result["decode_totals"], result["prefill_totals"]
    print(f"decode step: roofline {d['predicted_s'] * 1e3:.2f} ms, ops measured alone "
          f"{d['measured_s'] * 1e3:.2f} ms over {d['ops_per_pass']} ops")
    print(f"prefill:     roofline {p['predicted_s'] * 1e3:.2f} ms, ops measured alone "
          f"{p['measured_s'] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
