"""04 — misusing a cache: wrong answers that raise nothing, and the guard that makes them errors.

A KV cache is a pile of keys and values; nothing in it says which tokens they came from. So a
cache handed to the wrong request is read as if it were right. Request A ("The capital of France
is" plus 8 greedy tokens) fills a cache; then request B (the seed book's prompt) is given A's
cache by an engine that, like ours, feeds the model only what the cache does not hold yet. B's
first positions are never computed: B attends to A's keys as if they were its own beginning.

Measured (hypothesis: wrong, silently): B's next-token logits against B's correct run (max |diff|,
the top token) and B's greedy continuation. Then two legitimate reuses that must give exactly the
fresh result: after `reset()`, and for a request whose first tokens *are* the cached ones (the
idea behind prefix caching, chapter 11). Finally the guard: `KVCacheEngine` checks that a cache's
recorded tokens are the request's own first tokens and raises `CacheMisuseError` otherwise.

Results go to results/cpu/ch04_misuse.json.

Run it:  python 04_misuse.py
"""


import torch

from chapters.ch04_kv_cache.cache import CacheMisuseError
from chapters.ch04_kv_cache.engine import CachedSequence, KVCacheEngine
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.contracts import RequestMetrics, SamplingParams

parser = script_parser(__doc__)
parser.add_argument("--tokens", type=int, default=16, help="greedy tokens for request B")
args, started = parse_script(parser)

engine = KVCacheEngine(args.model)
model, tok = engine.model, engine.tokenizer
params = SamplingParams(temperature=0.0, max_tokens=args.tokens + 16, ignore_eos=True)


def sequence(prompt_ids: list[int]) -> CachedSequence:
    return engine.new_sequence(prompt_ids, params, RequestMetrics())


@torch.inference_mode()
def naive_next_logits(seq: CachedSequence) -> torch.Tensor:
    """The engine's `next_logits` without its guard: feed what the cache does not hold yet."""
    start = int(seq.cache.lengths[0])
    new = seq.token_ids[start:]
    positions = torch.arange(start, start + len(new), device=engine.device)[None]
    return model(torch.tensor([new], device=engine.device), positions, seq.cache, last_only=True)[0, -1]


@torch.inference_mode()
def continue_greedy(seq: CachedSequence, first_logits: torch.Tensor, n: int, step=naive_next_logits) -> list[int]:
    out, logits = [], first_logits
    for _ in range(n):
        out.append(int(logits.argmax()))
        seq.token_ids.append(out[-1])
        if len(out) < n:
            logits = step(seq)
    return out


# ---- request A fills a cache --------------------------------------------------------------------
a_prompt = tok.encode("The capital of France is")
a = sequence(a_prompt)
a_out = continue_greedy(a, naive_next_logits(a), 8)
print(f"request A: {tok.decode(a_prompt)!r} -> {tok.decode(a_out)!r}; the cache holds "
      f"{int(a.cache.lengths[0])} positions")

# ---- the correct run of B: its own fresh cache ---------------------------------------------------
b_prompt = tok.encode(config.PROMPT)
fresh = sequence(b_prompt)
fresh_logits = naive_next_logits(fresh)
fresh_out = continue_greedy(fresh, fresh_logits, args.tokens)

# ---- misuse: B is handed A's cache ---------------------------------------------------------------
stale = CachedSequence(list(b_prompt), len(b_prompt), a.cache)
stale_logits = naive_next_logits(stale)  # computes only B's positions 12.., reading A's keys for 0..11
stale_out = continue_greedy(stale, stale_logits, args.tokens)
diff = (stale_logits - fresh_logits).abs().max().item()
p_fresh, p_stale = fresh_logits.softmax(-1), stale_logits.softmax(-1)
kl = float((p_fresh * (p_fresh.log() - p_stale.log())).sum())
same = sum(x == y for x, y in zip(stale_out, fresh_out))
print(f"\nrequest B {config.PROMPT[:40]!r}... ({len(b_prompt)} tokens)")
print(f"  with its own cache  -> {tok.decode(fresh_out)!r}")
print(f"  with A's cache      -> {tok.decode(stale_out)!r}    (nothing raised)")
print(f"  next-token logits: max |diff| {diff:.2f} (logits up to {fresh_logits.abs().max():.1f}), "
      f"KL(correct || stale) {kl:.2f} nats, top token {tok.decode([int(fresh_logits.argmax())])!r} vs "
      f"{tok.decode([int(stale_logits.argmax())])!r}")
print(f"  greedy tokens equal to the correct run: {same} of {args.tokens}")

# ---- legitimate reuse: after reset(), and when the cached tokens are the request's prefix ------------
a.cache.reset()
after_reset = CachedSequence(list(b_prompt), len(b_prompt), a.cache)
reset_out = continue_greedy(after_reset, engine.next_logits(after_reset)[0], args.tokens,
                            step=lambda s: engine.next_logits(s)[0])
prefix = sequence(b_prompt[:10])  # a request whose prompt is B's first 10 tokens
engine.next_logits(prefix)
extended = CachedSequence(list(b_prompt), len(b_prompt), prefix.cache)  # B reuses it: legitimate
logits, computed = engine.next_logits(extended)
prefix_out = continue_greedy(extended, logits, args.tokens, step=lambda s: engine.next_logits(s)[0])
print(f"\nreuse after reset(): identical to the fresh run: {reset_out == fresh_out}")
print(f"reuse of a cache holding B's own first 10 tokens: identical: {prefix_out == fresh_out}, "
      f"prefill computed {computed} of {len(b_prompt)} positions")

# ---- the guard -----------------------------------------------------------------------------------
a2 = sequence(a_prompt)
engine.next_logits(a2)
try:
    engine.next_logits(CachedSequence(list(b_prompt), len(b_prompt), a2.cache))
    guard = "no error"
except CacheMisuseError as exc:
    guard = str(exc)
print(f"\nKVCacheEngine.next_logits with A's cache for B: CacheMisuseError: {guard}")

record = {
    "request_a": {"prompt": tok.decode(a_prompt), "output": tok.decode(a_out)},
    "request_b": {"prompt": config.PROMPT, "prompt_tokens": len(b_prompt)},
    "misuse": {
        "next_token_max_abs_diff": diff,
        "next_token_kl_nats": kl,
        "max_abs_logit": fresh_logits.abs().max().item(),
        "top_token_correct": tok.decode([int(fresh_logits.argmax())]),
        "top_token_stale": tok.decode([int(stale_logits.argmax())]),
        "greedy_equal": same,
        "greedy_tokens": args.tokens,
        "correct_text": tok.decode(fresh_out),
        "stale_text": tok.decode(stale_out),
    },
    "reuse_after_reset_identical": reset_out == fresh_out,
    "reuse_of_own_prefix_identical": prefix_out == fresh_out,
    "reuse_of_own_prefix_positions_computed": computed,
    "guard_error": guard,
}
path = save_results("ch04_misuse", record, device=str(engine.device), started=started,
                    model={"manifest": engine.loaded.manifest, "manifest_sha256": engine.loaded.manifest_sha256})
print(f"\nwrote {path}")
