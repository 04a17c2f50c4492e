"""How much of a decode step is the host (Python, dispatcher, kernel launches) rather than the
machine's arithmetic and memory? On a GPU the profiler timeline answers directly: the GPU's idle
time between kernels. On a CPU the host and the arithmetic share the same cores, so this estimates
it: ops per step times the measured cost of one tiny op (00_ceilings.py).
Writes results/cpu/ch06_host_overhead.json (or $OUT/ on a GPU).

    python chapters/ch06_profiling/03_host_overhead.py [--context 256]
"""

from __future__ import annotations

import argparse
import json

from chapters.ch06_profiling import ceilings, timeline
from chapters.ch06_profiling.report import out_dir, write_json
from shared.config import DEVICE
from shared.model import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (see 00_ceilings.py)")
    args = parser.parse_args()
    ceilings.pin_threads(args.device, args.threads)
    saved = out_dir(args.device) / "ch06_ceilings.json"
    ceil = json.loads(saved.read_text()) if saved.is_file() else ceilings.measure(args.device)
    per_op = ceil["op_overhead"]["per_op_s"]
    loaded = load_model(device=args.device)
    cuda = args.device.startswith("cuda")
    result: dict = {"device": args.device, "context": args.context, "tiny_op_s": per_op, "steps": {}}
    for name, step in timeline.decode_steps(loaded.model, args.context, graph=cuda).items():
        s = timeline.profile_steps(step, args.device, steps=20 if cuda else 5)
        s["host_estimate_s"] = s["aten_ops_per_step"] * per_op
        result["steps"][name] = s
    print(f"wrote {write_json('ch06_host_overhead.json', result, args.device)}")
    if cuda:
        print(f"{'step':<12}{'wall us':>10}{'kernels':>9}{'GPU busy us':>13}{'GPU idle us':>13}{'idle':>7}")
        for name, s in result["steps"].items():
            print(f"{name:<12}{s['wall_per_step_s'] * 1e6:>10.0f}{s['kernels_per_step']:>9.0f}"
                  f"{s['gpu_busy_s_per_step'] * 1e6:>13.0f}{s['gpu_idle_s_per_step'] * 1e6:>13.0f}"
                  f"{s['gpu_idle_fraction']:>7.0%}")
    else:
        print(f"{'step':<12}{'wall ms':>10}{'ops/step':>10}{'ops x tiny-op ms':>18}{'share':>7}")
        for name, s in result["steps"].items():
            print(f"{name:<12}{s['wall_per_step_s'] * 1e3:>10.2f}{s['aten_ops_per_step']:>10.0f}"
                  f"{s['host_estimate_s'] * 1e3:>18.2f}"
                  f"{s['host_estimate_s'] / s['wall_per_step_s']:>7.0%}")


if __name__ == "__main__":
    main()
