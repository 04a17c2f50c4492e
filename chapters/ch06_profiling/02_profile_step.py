"""Profile one batch-1 decode step with torch.profiler: which ops take the time, how many ops a step
runs, and how the profiler's matmul time compares with the roofline's prediction for the matmuls.
Profiles the library's step (transformers, dynamic cache) and ours (chapter 3's model over a static
cache). Writes results/cpu/ch06_profile_step.json (or $OUT/ on a GPU).

    python chapters/ch06_profiling/02_profile_step.py [--context 256] [--threads N]
"""

from __future__ import annotations

import argparse
import json

import torch

from chapters.ch06_profiling import ceilings, roofline, timeline
from chapters.ch06_profiling.report import out_dir, write_json
from shared.config import DEVICE
from shared.model import load_model

MATMULS = {"q_proj", "k_proj", "v_proj", "o_proj", "mlp_gate", "mlp_up", "mlp_down", "lm_head"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (see 00_ceilings.py)")
    args = parser.parse_args()
    ceilings.pin_threads(args.device, args.threads)
    saved = out_dir(args.device) / "ch06_ceilings.json"
    ceil = json.loads(saved.read_text()) if saved.is_file() else ceilings.measure(args.device)
    loaded = load_model(device=args.device)
    e = torch.finfo(next(loaded.model.parameters()).dtype).bits // 8
    ops = roofline.decode_ops(roofline.ModelShape.from_config(loaded.model.config), 1,
                              args.context, e)
    matmul_pred = sum(roofline.predict(o, ceil)[0] * o.count for o in ops if o.name in MATMULS)
    all_pred = sum(roofline.predict(o, ceil)[0] * o.count for o in ops)
    steps = timeline.decode_steps(loaded.model, args.context, graph=args.device.startswith("cuda"))
    result: dict = {"device": args.device, "context": args.context,
                    "roofline_matmul_s": matmul_pred, "roofline_step_s": all_pred,
                    "ops_counted_per_step": sum(o.count for o in ops), "steps": {}}
    for name, step in steps.items():
        summary = timeline.profile_steps(step, args.device, steps=args.steps)
        result["steps"][name] = summary
        print(timeline.format_summary(name, summary))
        for op, ms in list(summary["top_cpu_self_ms_per_step"].items())[:6]:
            print(f"    {op:<50} {ms:8.3f} ms/step (self CPU)")
    print(f"wrote {write_json('ch06_profile_step.json', result, args.device)}")
    print(f"\nroofline for the whole step {all_pred * 1e3:.2f} ms, of which matmuls "
          f"{matmul_pred * 1e3:.2f} ms ({len(ops)} kinds of op, {result['ops_counted_per_step']} calls)")
    print(f"{'step':<12}{'wall ms':>10}{'matmul ms':>11}{'ops/step':>10}")
    for name, s in result["steps"].items():
        print(f"{name:<12}{s['wall_per_step_s'] * 1e3:>10.2f}"
              f"{s['matmul_cpu_self_s_per_step'] * 1e3:>11.2f}{s['aten_ops_per_step']:>10.0f}")


if __name__ == "__main__":
    main()
