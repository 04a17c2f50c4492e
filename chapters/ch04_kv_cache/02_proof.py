"""02 — the proof: the cache changes how much is computed, never what.

For several prompts and lengths, including one prompt that fills most of the 8,192-token context,
chapter 4's engine generates greedily and we keep the logits of every step. Chapter 3's model
(no cache) then runs once over prompt + continuation: because it is causal, its logits at each
position are exactly what its own generation loop would have computed at that step, so one pass
checks every step (running chapter 3's loop itself on 7,000 tokens would take hours here; for the
short cases the script runs it too). Two claims per case:

* logits at every step within 1e-3 of chapter 3's (float32; logits are tens);
* the same greedy token at every step (equivalently: the same continuation).

Falsified by any step over the tolerance or any differing token. Results go to
results/cpu/ch04_proof.json.

Run it:  python 02_proof.py                  (a few minutes: the long prompt's prefill dominates)
         python 02_proof.py --long 2000      (a shorter "long" prompt)
"""

import time

import torch

from chapters.ch03_model.engine import ModelEngine
from chapters.ch04_kv_cache.engine import KVCacheEngine
from chapters.ch04_kv_cache.proof import cached_greedy, reference_logits
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.contracts import SamplingParams
from shared.model import load_model

TOLERANCE = {torch.float32: 1e-3}  # bfloat16 (a GPU): no stated tolerance, differences reported

parser = script_parser(__doc__)
parser.add_argument("--long", type=int, default=7000, help="tokens in the long prompt")
args, started = parse_script(parser)

loaded = load_model(args.model)
cached, no_cache = KVCacheEngine(loaded), ModelEngine(loaded)
tok = loaded.tokenizer


def counting_prompt(n_tokens: int) -> list[int]:
    """"1, 2, 3, ..." up to n_tokens tokens: long, deterministic, and its continuation is checkable."""
    numbers, ids = [], []
    i = 1
    while len(ids) < n_tokens:
        numbers.extend(str(j) for j in range(i, i + 100))
        i += 100
        ids = tok.encode(", ".join(numbers) + ",")
    while len(ids) > n_tokens:
        numbers.pop()
        ids = tok.encode(", ".join(numbers) + ",")
    return ids


cases = [(config.PROMPT, 32), ("The capital of France is", 128),
         ("<|im_start|>user\nWrite a haiku about bees.<|im_end|>\n<|im_start|>assistant\n", 64)]
rows = []
print(f"{'case':<36} {'prompt':>6} {'new':>4} {'max |diff|':>10} {'max |logit|':>11} "
      f"{'tokens equal':>12} {'ch03 loop equal':>15} {'seconds':>8}")
for label, prompt, n in [(text[:34], tok.encode(text), n) for text, n in cases] + [
    (f"counting, {args.long} tokens", counting_prompt(args.long), 16)
]:
    t = time.perf_counter()
    out, ours = cached_greedy(cached, prompt, n)
    ref = reference_logits(cached, prompt, out)
    diff = (ours - ref).abs().max().item()
    equal = bool((ref.argmax(-1) == torch.tensor(out, device=ref.device)).all())
    loop_equal = None
    if len(prompt) + n <= 256:  # chapter 3's own loop, where it is affordable
        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        loop_equal = no_cache.generate(prompt, params).output_ids == out
    seconds = time.perf_counter() - t
    rows.append({"case": label, "prompt_tokens": len(prompt), "new_tokens": n, "max_abs_diff": diff,
                 "max_abs_logit": ref.abs().max().item(), "greedy_equal": equal,
                 "ch03_loop_equal": loop_equal, "continuation": tok.decode(out), "seconds": seconds})
    print(f"{label!r:<36} {len(prompt):>6} {n:>4} {diff:>10.2e} {ref.abs().max().item():>11.2f} "
          f"{str(equal):>12} {str(loop_equal):>15} {seconds:>8.1f}")
    print(f"    -> {tok.decode(out)[:90]!r}")

tolerance = TOLERANCE.get(cached.dtype)
ok = all((tolerance is None or r["max_abs_diff"] < tolerance) and r["greedy_equal"] for r in rows)
print(f"\nall cases {'within %g and ' % tolerance if tolerance else ''}token-identical: {ok}")
record = {"tolerance": tolerance, "all_within_tolerance_and_identical": ok, "cases": rows,
          "threads": torch.get_num_threads()}
path = save_results("ch04_proof", record, device=str(cached.device), started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"wrote {path}")
