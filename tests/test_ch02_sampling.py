"""Chapter 2's samplers: the vectorised torch sampler against the pure-Python reference, exact ties,
the filters, and the per-step seeds (distinct requests must draw distinct random streams)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import pytest
import torch

from chapters.ch02_generate_loop.sampling import (
    ReferenceSampler,
    TorchSampler,
    derive_seed,
    naive_seed,
    uniform,
)
from shared.contracts import SamplingParams

REF, VEC = ReferenceSampler(), TorchSampler()


# The configurations: greedy, temperature, + top-k, + top-p, all three (and a few edges).
CONFIGS = {
    "greedy": SamplingParams(temperature=0.0),
    "temperature": SamplingParams(temperature=0.8),
    "temperature+top_k": SamplingParams(temperature=0.8, top_k=40),
    "temperature+top_p": SamplingParams(temperature=0.8, top_p=0.9),
    "all_three": SamplingParams(temperature=0.8, top_k=40, top_p=0.9),
    "hot_narrow_nucleus": SamplingParams(temperature=1.7, top_p=0.3),
    "top_k_1": SamplingParams(temperature=1.0, top_k=1),
    "cold": SamplingParams(temperature=0.05, top_k=5, top_p=0.99),
}


def _logit_sets() -> list[torch.Tensor]:
    """Float32 logits like a model's: several scales, a few with many exact ties (rounded)."""
    g = torch.Generator().manual_seed(1234)
    sets = []
    for scale in (0.5, 2.0, 6.0):
        for _ in range(4):
            sets.append(torch.randn(512, generator=g) * scale)
    sets.append((torch.randn(512, generator=g) * 2).round())  # ~10 distinct values: ties everywhere
    sets.append(torch.randn(49_152, generator=g) * 3)  # the real vocabulary size
    return sets


def test_differential_reference_vs_torch_zero_mismatches() -> None:
    compared = mismatches = 0
    for i, logits in enumerate(_logit_sets()):
        as_list = logits.tolist()
        seeds = range(4) if logits.numel() > 10_000 else range(20)  # the reference is slow at 49k
        for (name, params), seed in itertools.product(CONFIGS.items(), seeds):
            step_seed = derive_seed(seed, i)
            a = REF.sample(as_list, params, step_seed)
            b = VEC.sample(logits, params, step_seed)
            compared += 1
            if a != b:
                mismatches += 1
                print(f"MISMATCH set={i} config={name} seed={seed}: reference {a}, torch {b}")
    print(f"differential test: {compared} draws compared, {mismatches} mismatches")
    assert compared == 13 * 20 * len(CONFIGS) + 4 * len(CONFIGS)
    assert mismatches == 0


def test_batched_rows_equal_single_rows() -> None:
    """sample_batch with a different SamplingParams and seed per row = each row sampled alone."""
    logits = torch.stack(_logit_sets()[:8])
    params = list(CONFIGS.values())
    seeds = [derive_seed(s, 3) for s in range(8)]
    batched = VEC.sample_batch(logits, params, seeds)
    assert batched == [VEC.sample(row, p, s) for row, p, s in zip(logits, params, seeds)]
    assert batched == [REF.sample(row.tolist(), p, s) for row, p, s in zip(logits, params, seeds)]
    # Every row with top-k (a different k each): the topk fast path, padding rows with k < max k;
    # the rounded row has ties at its k-th value.
    tied = _logit_sets()[12]
    logits = torch.stack([tied, tied, logits[0], logits[5]])
    params = [SamplingParams(top_k=k, temperature=0.9, top_p=p) for k, p in
              [(40, 1.0), (3, 1.0), (100, 0.8), (7, 0.95)]]
    for seed in range(20):
        seeds = [derive_seed(seed, row) for row in range(4)]
        expected = [REF.sample(r.tolist(), p, s) for r, p, s in zip(logits, params, seeds)]
        assert VEC.sample_batch(logits, params, seeds) == expected


def test_sample_batch_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="one SamplingParams and one seed per row"):
        VEC.sample_batch(torch.zeros(2, 10), [SamplingParams()], [0, 1])
    with pytest.raises(ValueError, match=r"\[B, V\]"):
        VEC.sample_batch(torch.zeros(10), [SamplingParams()], [0])


@pytest.mark.parametrize("sampler", [REF, VEC], ids=["reference", "torch"])
def test_exact_ties(sampler: ReferenceSampler | TorchSampler) -> None:
    def draw(values: list[float], params: SamplingParams, seed: int = 0) -> int:
        return sampler.sample(torch.tensor(values), params, derive_seed(seed, 0))

    greedy = SamplingParams(temperature=0.0)
    assert draw([1.0, 3.0, 3.0, 2.0], greedy) == 1  # the lower of the two tied ids
    assert draw([7.0] * 6, greedy) == 0
    # top_k=1 is greedy too, and takes the lower tied id at any temperature.
    assert draw([0.0, 5.0, 5.0], SamplingParams(temperature=2.0, top_k=1)) == 1
    # top_k=2 over three tied tokens keeps ids 0 and 1, never 2; both come up.
    seen = Counter(draw([5.0, 5.0, 5.0, 0.0], SamplingParams(top_k=2), s) for s in range(200))
    assert set(seen) == {0, 1}
    # A nucleus of 0.3 over four equal tokens needs two of them (0.25 < 0.3): the lower ids.
    seen = Counter(draw([2.0] * 4, SamplingParams(top_p=0.3), s) for s in range(200))
    assert set(seen) == {0, 1}
    # Exactly reaching p stops there: 0.5 of four equal tokens is ids 0 and 1.
    seen = Counter(draw([2.0] * 4, SamplingParams(top_p=0.5), s) for s in range(200))
    assert set(seen) == {0, 1}


def test_filters_keep_only_what_they_should() -> None:
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -1.0])
    for seed in range(300):
        s = derive_seed(seed, 0)
        assert VEC.sample(logits, SamplingParams(top_k=3), s) in {0, 1, 2}
        # softmax([4, 3, 2, ...]): p0 = 0.63, p0 + p1 = 0.87: top_p 0.8 keeps ids 0 and 1.
        assert VEC.sample(logits, SamplingParams(top_p=0.8), s) in {0, 1}
        assert VEC.sample(logits, SamplingParams(top_p=0.5), s) == 0


def test_draws_follow_the_softmax() -> None:
    """derive_seed + inverse CDF sample the right distribution (4,000 draws, 4 tokens)."""
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    probs = torch.softmax(logits, dim=-1).tolist()
    n = 4000
    seeds = [derive_seed(7, step) for step in range(n)]
    counts = Counter(VEC.sample_batch(logits.expand(n, -1), [SamplingParams()] * n, seeds))
    for token, p in enumerate(probs):
        # 5 standard deviations of a binomial count: fails by chance about once in 10^6 runs.
        assert abs(counts[token] - n * p) < 5 * (n * p * (1 - p)) ** 0.5, (token, counts, probs)


def test_uniform_is_in_range() -> None:
    draws = [uniform(derive_seed(3, step)) for step in range(1000)]
    assert all(0.0 <= u < 1.0 for u in draws)
    assert 0.45 < sum(draws) / len(draws) < 0.55
    assert derive_seed(-1, 0) == derive_seed(2**64 - 1, 0)  # seeds are taken modulo 2**64


# ---- distinct requests must draw distinct random streams ----------------------------------------


def stream_collisions(derive: Callable[[int, int], int], seeds: range, steps: range) -> list[tuple]:
    """Pairs of (request seed, step) that received the same per-step seed."""
    owner: dict[int, tuple[int, int]] = {}
    collisions = []
    for seed, step in itertools.product(seeds, steps):
        value = derive(seed, step)
        if value in owner:
            collisions.append((owner[value], (seed, step)))
        owner[value] = (seed, step)
    return collisions


def test_distinct_requests_draw_distinct_streams() -> None:
    """The regression test: 64 requests (seeds 0..63) x 64 steps, no per-step seed shared."""
    assert stream_collisions(derive_seed, range(64), range(64)) == []


def test_naive_seed_plus_step_fails_the_regression_test() -> None:
    """`seed + step` gives request 2 at step 0 the randomness of request 1 at step 1, and so on:
    the test above, run on it, finds thousands of collisions."""
    collisions = stream_collisions(naive_seed, range(64), range(64))
    assert ((1, 1), (2, 0)) in collisions
    assert len(collisions) > 2000
    # What the collision means: request 2's uniforms are request 1's, shifted by one step.
    u1 = [uniform(naive_seed(1, t)) for t in range(10)]
    u2 = [uniform(naive_seed(2, t)) for t in range(10)]
    assert u2[:9] == u1[1:]
    h1 = [uniform(derive_seed(1, t)) for t in range(10)]
    h2 = [uniform(derive_seed(2, t)) for t in range(10)]
    assert not set(h1) & set(h2)
