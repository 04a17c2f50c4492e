"""Token selection written from scratch: a pure-Python reference sampler and a vectorised torch
sampler that must agree with it exactly.

Both apply vLLM's filter order to one position's logits:

1. temperature: divide the logits by T (T = 0, or top_k = 1, means greedy: take the argmax, ties
   broken toward the lower token id);
2. top-k: keep the k highest;
3. top-p (nucleus): of those, keep the smallest prefix, highest first, whose probability mass
   reaches p;

then draw one token from what is left, renormalised.

Exact agreement needs every decision to be made the same way on both sides:

* The order of candidates is the order of (scaled logit descending, token id ascending). Sorting
  logits rather than probabilities matters: two distinct logits can round to the same probability.
* All arithmetic is float64. Both samplers receive the same float32 logits; their float64 copies
  are identical, so division by T and the sort are identical too. Only `exp` and summation order
  may differ in the last bit, which can flip a draw only when the uniform lands within ~1e-16 of a
  boundary.
* The randomness is one uniform number u in [0, 1) per step, drawn in plain Python from
  `derive_seed(seed, step)`, not from torch's generator (whose streams differ between CPU and GPU,
  and which one global state would share between requests). The token is found by inverse CDF:
  the first candidate, in the order above, whose cumulative weight exceeds u times the total
  weight.

Why a hash for `derive_seed` and not `seed + step`: with `seed + step`, request 2's step 0 uses the
same randomness as request 1's step 1, request 3's step 0 that of request 1's step 2, and so on:
neighbouring seeds produce shifted copies of one random stream. `naive_seed` is kept here only so
the chapter's tests and `03_seeds.py` can show that failure.
"""

from __future__ import annotations

import hashlib
import math
import random
import secrets
from collections.abc import Sequence

import torch

from shared.contracts import SamplingParams

_MASK64 = (1 << 64) - 1


def derive_seed(seed: int, step: int) -> int:
    """The 64-bit seed for one step of one request: a hash of (seed, step).

    A hash mixes both inputs, so (seed, step) pairs that differ anywhere give unrelated outputs;
    seeds outside [0, 2**64) (SamplingParams allows negative ones) are taken modulo 2**64."""
    data = (seed & _MASK64).to_bytes(8, "little") + step.to_bytes(8, "little")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def naive_seed(seed: int, step: int) -> int:
    """The scheme not to use (see the module docstring): kept to demonstrate its aliasing."""
    return (seed + step) & _MASK64


def uniform(step_seed: int) -> float:
    """The step's one random number, in [0, 1): the first draw of a generator seeded with the
    step's seed. Python's Mersenne Twister gives the same float for the same integer seed on every
    platform and version, and costs no tensor, so both samplers (and any device) share it."""
    return random.Random(step_seed).random()


def fresh_seed() -> int:
    """A seed for a request that did not bring one; the engine records it so a run can be
    repeated. 63 bits so it is a valid non-negative SamplingParams seed."""
    return secrets.randbits(63)


class ReferenceSampler:
    """The definition of sampling in plain Python, one position at a time, on a list of floats.
    Slow (tens of milliseconds for a 49,152-token vocabulary) and meant to be read."""

    name = "reference"

    def sample(
        self, logits: Sequence[float] | torch.Tensor, params: SamplingParams, step_seed: int
    ) -> int:
        if isinstance(logits, torch.Tensor):  # the engine hands both samplers a tensor
            logits = logits.tolist()
        if params.is_greedy:
            return _greedy(logits)
        t = params.temperature
        scaled = [float(x) / t for x in logits]
        # Candidates, best first. Python's sort is stable even with reverse=True, so equal logits
        # keep ascending id order.
        order = sorted(range(len(scaled)), key=scaled.__getitem__, reverse=True)
        if params.top_k > 0:
            order = order[: params.top_k]
        # Unnormalised probabilities exp(l - max); dividing by their sum is left to the draw.
        top = scaled[order[0]]
        weights = [math.exp(scaled[i] - top) for i in order]
        if params.top_p < 1.0:
            threshold = params.top_p * _cumsum(weights)[-1]
            kept, mass = 0, 0.0
            # Keep a token while the mass before it is still short of p: the smallest prefix
            # whose mass reaches p (always at least one token).
            while kept < len(weights) and mass < threshold:
                mass += weights[kept]
                kept += 1
            order, weights = order[:kept], weights[:kept]
        cdf = _cumsum(weights)
        target = uniform(step_seed) * cdf[-1]
        for i, c in zip(order, cdf):
            if c > target:
                return i
        # Only when rounding puts the target at the very top: the last candidate with any weight
        # (weights are non-increasing, and exp can underflow to 0 far down the list).
        return order[sum(w > 0 for w in weights) - 1]


def _greedy(logits: Sequence[float]) -> int:
    best = 0
    for i, x in enumerate(logits):
        if x > logits[best]:  # strictly greater: a tie keeps the lower id
            best = i
    return best


def _cumsum(values: Sequence[float]) -> list[float]:
    out, acc = [], 0.0
    for v in values:
        acc += v
        out.append(acc)
    return out


class TorchSampler:
    """The same sampler with tensor operations, for one row ([V] logits) or a batch ([B, V],
    one SamplingParams and one step seed per row, which chapter 5's batches need)."""

    name = "torch"

    def sample(self, logits: torch.Tensor, params: SamplingParams, step_seed: int) -> int:
        return self.sample_batch(logits.reshape(1, -1), [params], [step_seed])[0]

    def sample_batch(
        self,
        logits: torch.Tensor,
        params: Sequence[SamplingParams],
        step_seeds: Sequence[int],
    ) -> list[int]:
        if logits.dim() != 2 or logits.shape[0] != len(params) or len(params) != len(step_seeds):
            raise ValueError(
                f"logits must be [B, V] with one SamplingParams and one seed per row; got logits "
                f"{tuple(logits.shape)}, {len(params)} params, {len(step_seeds)} seeds"
            )
        rows, vocab = logits.shape
        x = logits.detach().to(torch.float64)
        # argmax returns the first maximal index, i.e. ties go to the lower id, like _greedy.
        out = x.argmax(dim=-1)
        sampled = [r for r, p in enumerate(params) if not p.is_greedy]
        if sampled:
            idx = torch.tensor(sampled, device=x.device)
            out[idx] = self._sample_rows(
                x[idx], [params[r] for r in sampled], [step_seeds[r] for r in sampled]
            )
        return out.tolist()

    @staticmethod
    def _sample_rows(
        x: torch.Tensor, params: Sequence[SamplingParams], step_seeds: Sequence[int]
    ) -> torch.Tensor:
        dev = x.device
        temperature = torch.tensor([p.temperature for p in params], dtype=x.dtype, device=dev)
        top_k = [p.top_k if p.top_k > 0 else x.shape[-1] for p in params]
        scaled, ids = _candidates(x / temperature[:, None], top_k)
        # Unnormalised probabilities exp(l - max); candidates past a row's k (or padding) weigh 0.
        rank = torch.arange(scaled.shape[-1], device=dev)
        keep = rank[None, :] < torch.tensor(top_k, device=dev)[:, None]
        weights = torch.exp(scaled - scaled[:, :1]) * keep
        # top-p: keep a candidate while the mass before it is short of p times the total.
        top_p = torch.tensor([p.top_p for p in params], dtype=x.dtype, device=dev)
        cdf = weights.cumsum(dim=-1)
        # The mass before each candidate is the previous cumulative sum, shifted (not cdf - w,
        # which rounds differently from the reference's running sum).
        mass_before = torch.nn.functional.pad(cdf[:, :-1], (1, 0))
        filtered = (top_p < 1.0)[:, None] & (mass_before >= top_p[:, None] * cdf[:, -1:])
        weights = weights.masked_fill(filtered, 0.0)
        cdf = weights.cumsum(dim=-1)
        u = torch.tensor([uniform(s) for s in step_seeds], dtype=x.dtype, device=dev)
        target = u * cdf[:, -1]
        # Inverse CDF: the first candidate whose cumulative weight exceeds the target.
        pick = torch.searchsorted(cdf, target[:, None], right=True).clamp(max=cdf.shape[-1] - 1)
        # Rounding could land on a zero-weight tail; step back to the last kept candidate.
        last_kept = (weights > 0).sum(dim=-1, keepdim=True) - 1
        pick = torch.minimum(pick, last_kept)
        return ids.gather(-1, pick).squeeze(-1)


def _candidates(scaled: torch.Tensor, top_k: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's candidates sorted by (scaled logit descending, id ascending): values and ids,
    [B, K]. Without top-k that is a stable sort of the whole vocabulary, which dominates the
    sampler's time (49,152 entries). With top-k on every row, only the K = max(k) best can be
    chosen, so it finds them with `topk` and sorts just those.

    `topk` does not say which of several tied values it returns, so it is used only for each row's
    k-th largest value; the row's k winners are then every value above it plus, of the values equal
    to it, the lowest ids, exactly the reference's choice."""
    rows, vocab = scaled.shape
    k_max = max(top_k)
    if k_max >= vocab:
        return scaled.sort(dim=-1, descending=True, stable=True)
    k = torch.tensor(top_k, device=scaled.device)[:, None]
    kth = scaled.topk(k_max, dim=-1).values.gather(-1, k - 1)
    above, tied = scaled > kth, scaled == kth
    # Of the tied values, take the lowest ids until the row has k: rank the ties by id order.
    wins = above | (tied & (tied.cumsum(dim=-1) <= k - above.sum(dim=-1, keepdim=True)))
    # Pack each row's winners, in id order, into K slots; rows with k < K are padded with -inf.
    slot = (wins.cumsum(dim=-1) - 1).masked_fill(~wins, k_max)  # losers go to a spill slot
    values = scaled.new_full((rows, k_max + 1), float("-inf"))
    values.scatter_(-1, slot, scaled)
    ids = torch.zeros(rows, k_max + 1, dtype=torch.long, device=scaled.device)
    ids.scatter_(-1, slot, torch.arange(vocab, device=scaled.device).expand(rows, -1))
    values, order = values[:, :k_max].sort(dim=-1, descending=True, stable=True)
    return values, ids[:, :k_max].gather(-1, order)
