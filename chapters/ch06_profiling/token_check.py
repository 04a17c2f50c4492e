"""Are two engines' greedy tokens the same, and if not, how close was the choice where they part?

Two engines that do the same arithmetic in a different order (a graph over a masked static cache
against chapter 4's exact-length cache; fused kernels against eager ones) round differently. In
float32 the difference is far below any logit gap that matters; in bfloat16 (8 bits of mantissa:
logits near 20 are spaced 0.125 apart) two candidates a step or two apart can swap. A flip at a
near-tie is rounding; a flip where the reference's best token led by a wide margin is a bug. So a
comparison records, at the first differing position, the reference engine's top-2 logit gap there,
and the largest logit difference while the two sequences were still the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from shared.contracts import SamplingParams


def record_logits(engine: Any, prompt: str, params: SamplingParams) -> tuple[list[int], torch.Tensor]:
    """Generate, keeping the logits [steps, V] (float32) that every step selected from. An instance
    attribute shadows the engine's `select` for this call only; the engine is otherwise untouched."""
    rows: list[torch.Tensor] = []
    select_token = engine.select

    def keep(logits: torch.Tensor, p: SamplingParams, seed: int | None, step: int) -> int:
        rows.append(logits.float().clone())  # a graph's output buffer is overwritten next step
        return select_token(logits, p, seed, step)

    engine.select = keep
    try:
        ids = engine.generate(prompt, params).output_ids
    finally:
        del engine.select
    return ids, torch.stack(rows)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where the two differ (the shorter one's length if one is a prefix of
    the other), or None if they are equal."""
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None and len(a) != len(b):
        return min(len(a), len(b))
    return first


def compare(ref: tuple[list[int], torch.Tensor], other: tuple[list[int], torch.Tensor]) -> dict[str, Any]:
    """Tokens and logits of a reference engine and another one on the same prompt.

    Always: whether the tokens are identical, and the largest logit difference over the steps
    where both had produced the same tokens so far (later logits condition on different text).
    At the first difference: both tokens; `ref_top2_gap`, the reference's best logit minus its
    second best there (a near-tie explains a flip); `ref_logit_gap` and `other_logit_gap`, each
    engine's logit of its own token minus its logit of the other's token (>= 0)."""
    (a_ids, a_log), (b_ids, b_log) = ref, other
    first = first_difference(a_ids, b_ids)
    out: dict[str, Any] = {"identical": first is None, "first_difference_at": first,
                           "tokens": len(a_ids)}
    same = len(a_ids) if first is None else first
    # Step `same` still conditions on identical tokens: its logits are comparable too.
    comparable = min(same + 1, len(a_log), len(b_log))
    if comparable:
        out["max_abs_logit_diff_same_prefix"] = (a_log[:comparable] - b_log[:comparable]).abs().max().item()
        out["max_abs_logit"] = a_log[:comparable].abs().max().item()
    if first is not None and first < min(len(a_ids), len(b_ids)):
        x, y = a_ids[first], b_ids[first]
        top2 = a_log[first].topk(2).values
        out.update(ref_token=x, other_token=y, ref_top2_gap=(top2[0] - top2[1]).item(),
                   ref_logit_gap=(a_log[first, x] - a_log[first, y]).item(),
                   other_logit_gap=(b_log[first, y] - b_log[first, x]).item())
    return out


def check(ref_engine: Any, engine: Any, prompts: Sequence[str], params: SamplingParams) -> dict[str, Any]:
    """`compare` on every prompt; `identical` is true only if every prompt's tokens are."""
    if not params.is_greedy:
        raise ValueError("check compares greedy tokens; got sampling params with temperature "
                         f"{params.temperature}")
    rows = [{"prompt": p, **compare(record_logits(ref_engine, p, params),
                                    record_logits(engine, p, params))} for p in prompts]
    return {"identical": all(r["identical"] for r in rows), "prompts": len(rows),
            "max_tokens": params.max_tokens, "per_prompt": rows}


def summary(result: dict[str, Any]) -> str:
    """One line: identical, or where each differing prompt parted and how close the choice was."""
    if result["identical"]:
        return f"identical on {result['prompts']} prompts x {result['max_tokens']} tokens"
    parts = []
    for r in result["per_prompt"]:
        if not r["identical"]:
            gap = r.get("ref_top2_gap")
            parts.append(f"{r['prompt'][:20]!r} at {r['first_difference_at']}"
                         + (f" (reference top-2 gap {gap:.4f})" if gap is not None else ""))
    return f"differ on {len(parts)} of {result['prompts']} prompts: " + "; ".join(parts)
