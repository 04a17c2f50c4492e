"""Chapter 5's static batch: every row equals its solo run.

Under greedy decoding each row's tokens must be identical to the same request run alone through
the previous chapter's code (`StaticBatchEngine.generate`, inherited unchanged), and its logits
within `LOGIT_TOL` at every step. If a token ever differs, the failure says where and by how much
the logits differed (a near-tie flipped by float rounding reads differently from a masking bug),
rather than the test being loosened. Sampled rows with a seed equal their solo sampled runs; each
row stops on its own; a cancelled row does not disturb the others."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence

import pytest
import torch

from chapters.ch04_kv_cache.cache import CacheMisuseError
from chapters.ch05_static_batching.batch_cache import BatchKVCache
from chapters.ch05_static_batching.engine import BatchStats, StaticBatchEngine, left_pad
from shared.contracts import GenerateResult, SamplingParams, TokenEvent
from shared.engine import PromptTooLongError
from shared.model import load_model, tiny_model

# Batched and solo runs multiply the same numbers in different groupings (a [B*T, d] matrix
# product against a [T, d] one), so logits agree to float32 rounding, not bit for bit. Logits of
# these models are O(10); 1e-3 is far above rounding and far below any masking or position bug.
LOGIT_TOL = 1e-3

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)


class Recording(StaticBatchEngine):
    """Keeps the logits each token was chosen from: [B, V] per batch step, [V] per solo step."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.taken: list[torch.Tensor] = []

    def select_batch(self, logits, params, seeds, step):  # type: ignore[no-untyped-def]
        self.taken.append(logits.float().clone())
        return super().select_batch(logits, params, seeds, step)

    def select(self, logits, params, seed, step):  # type: ignore[no-untyped-def]
        self.taken.append(logits.float().clone())
        return super().select(logits, params, seed, step)


@pytest.fixture(scope="module")
def tiny() -> Recording:
    return Recording(tiny_model(seed=0))


def run_batch(engine: Recording, prompts: Sequence[list[int]], params: Sequence[SamplingParams]) -> tuple[list[GenerateResult], list[torch.Tensor]]:
    engine.taken = []
    out = engine.generate_batch(prompts, params)
    return out, engine.taken


def run_solo(engine: Recording, prompt: list[int], params: SamplingParams) -> tuple[GenerateResult, list[torch.Tensor]]:
    engine.taken = []
    out = engine.generate(prompt, params)
    return out, engine.taken


def assert_rows_equal_solo(engine: Recording, prompts: Sequence[list[int]], params: Sequence[SamplingParams]) -> list[GenerateResult]:
    batch, batch_logits = run_batch(engine, prompts, params)
    for row, (prompt, sp) in enumerate(zip(prompts, params)):
        solo, solo_logits = run_solo(engine, prompt, sp)
        got = batch[row]
        steps = min(len(solo_logits), sum(1 for step in batch_logits if step.shape[0] > row))
        diffs = [(batch_logits[k][row] - solo_logits[k]).abs().max().item() for k in range(steps)]
        if got.output_ids != solo.output_ids:
            k = next((i for i, (a, b) in enumerate(zip(got.output_ids, solo.output_ids)) if a != b),
                     min(len(got.output_ids), len(solo.output_ids)))
            s, b = solo_logits[k], batch_logits[k][row]
            ts, tb = int(s.argmax()), int(b.argmax())
            pytest.fail(
                f"row {row} (prompt of {len(prompt)} tokens, batch of {len(prompts)} with widths "
                f"{[len(p) for p in prompts]}) differs from its solo run at output token {k}: solo "
                f"chose {ts}, the batch chose {tb}. Solo logits: {s[ts].item():.6f} vs "
                f"{s[tb].item():.6f} (margin {(s[ts] - s[tb]).item():.3g}); batch logits: "
                f"{b[ts].item():.6f} vs {b[tb].item():.6f}; max |batch - solo| over the "
                f"vocabulary at that step {diffs[k] if k < len(diffs) else float('nan'):.3g}"
            )
        assert got.text == solo.text and got.finish_reason == solo.finish_reason, row
        if sp.is_greedy:
            worst = max(diffs)
            assert worst < LOGIT_TOL, f"row {row}: logits differ from solo by {worst:.3g} (step {diffs.index(worst)})"
    return batch


def random_prompts(rng: random.Random, n: int, longest: int) -> list[list[int]]:
    return [[rng.randrange(3, 49152) for _ in range(rng.randint(1, longest))] for _ in range(n)]


# ---- padding, positions, mask -------------------------------------------------------------------


def test_left_pad_puts_every_last_token_in_the_last_column() -> None:
    ids, positions = left_pad([[5, 6, 7], [8], [9, 10]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 9, 10]]
    assert positions.tolist() == [[0, 1, 2], [-1, -1, 0], [-1, 0, 1]]


@pytest.mark.parametrize("seed", range(6))
def test_greedy_rows_equal_solo_runs_in_mixed_length_batches(tiny: Recording, seed: int) -> None:
    rng = random.Random(seed)
    prompts = random_prompts(rng, n=rng.randint(2, 7), longest=40)
    assert_rows_equal_solo(tiny, prompts, [GREEDY] * len(prompts))


def test_a_row_does_not_depend_on_its_companions(tiny: Recording) -> None:
    """The same prompt, alone and beside much longer ones (heavy left padding): same logits."""
    short = [464, 6355, 314]
    alone, a_logits = run_batch(tiny, [short], [GREEDY])
    crowded, c_logits = run_batch(tiny, [list(range(100, 190)), short, list(range(300, 360))], [GREEDY] * 3)
    assert crowded[1].output_ids == alone[0].output_ids
    assert max((a[0] - c[1]).abs().max().item() for a, c in zip(a_logits, c_logits)) < LOGIT_TOL


def test_chat_prompts_on_the_tiny_model(tiny: Recording) -> None:
    prompts = [tiny.apply_chat_template([{"role": "user", "content": c}])
               for c in ["Hi", "What is the capital of France? Answer in one word.", "Count: 1, 2, 3"]]
    assert_rows_equal_solo(tiny, prompts, [GREEDY] * 3)


# ---- per-row sampling, seeds and stopping --------------------------------------------------------


def test_mixed_params_in_one_batch_equal_their_solo_runs(tiny: Recording) -> None:
    prompts = random_prompts(random.Random(11), n=5, longest=25)
    params = [
        SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True),
        SamplingParams(temperature=0.8, top_k=40, top_p=0.9, max_tokens=12, ignore_eos=True, seed=1),
        SamplingParams(temperature=1.2, max_tokens=7, ignore_eos=True, seed=2),
        SamplingParams(temperature=0.7, top_p=0.5, max_tokens=9, min_tokens=4, seed=3),
        SamplingParams(temperature=0.0, max_tokens=12, stop=("e",), ignore_eos=True),
    ]
    batch = assert_rows_equal_solo(tiny, prompts, params)
    assert [len(r.output_ids) for r in batch[:3]] == [3, 12, 7]  # each row stopped at its own max


def test_distinct_seeds_give_distinct_streams_and_equal_seeds_equal_ones(tiny: Recording) -> None:
    prompt = [464, 6355, 314, 4118]
    params = [SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True, seed=s) for s in (5, 6, 5, 7)]
    out, _ = run_batch(tiny, [prompt] * 4, params)
    ids = [tuple(r.output_ids) for r in out]
    assert ids[0] == ids[2]
    assert len({ids[0], ids[1], ids[3]}) == 3
    assert [r.metrics.extra["seed"] for r in out] == [5, 6, 5, 7]


class EosAt(Recording):
    """Forces EOS for chosen rows at chosen steps, to watch one row stop while the others go on."""

    def __init__(self, loaded: object, eos_at: dict[int, int]) -> None:
        super().__init__(loaded)
        self.eos_at = eos_at

    def select_batch(self, logits, params, seeds, step):  # type: ignore[no-untyped-def]
        tokens = super().select_batch(logits, params, seeds, step)
        return [self.eos_token_id if self.eos_at.get(r) == step else t for r, t in enumerate(tokens)]


def collect_steps(engine: StaticBatchEngine, prompts: list[list[int]], params: list[SamplingParams], cancels=None, stats=None) -> list[list[TokenEvent | None]]:
    return list(engine.stream_batch(prompts, params, cancels, stats))


def test_a_finished_row_stops_while_the_batch_runs_on(tiny: Recording) -> None:
    engine = EosAt(tiny.loaded, eos_at={0: 2})
    prompts = [[464, 6355], [314, 4118, 100, 200], [7, 8, 9]]
    params = [SamplingParams(temperature=0.0, max_tokens=8)] * 2 + [SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)]
    stats = BatchStats()
    steps = collect_steps(engine, prompts, params, stats=stats)
    finals = {row: k for k, step in enumerate(steps) for row, e in enumerate(step) if e is not None and e.finish_reason}
    assert steps[2][0] is not None and steps[2][0].finish_reason == "stop" and steps[2][0].token_id is None
    assert all(step[0] is None for step in steps[3:])  # nothing after its final event
    assert finals[2] == 4 and steps[4][2].finish_reason == "length"
    assert len(steps) == 8 and finals[1] == 7  # the batch ends with its last row
    for row in range(3):  # exactly one final event per row, and a row's events stop with it
        assert sum(1 for s in steps if s[row] is not None and s[row].finish_reason) == 1
    # Row 1's output equals its solo run despite row 0's and row 2's finishing early.
    solo = tiny.generate(prompts[1], params[1])
    assert [s[1].token_id for s in steps if s[1] is not None and s[1].token_id is not None] == solo.output_ids
    # Positions: a prefill of 3 rows x 4 (3 of them padding), then 7 decode steps of 3 rows, in
    # which row 0 rode along finished for 5 (steps 3-7) and row 2 for 3 (steps 5-7).
    assert (stats.rows, stats.prefill_width, stats.forward_passes) == (3, 4, 8)
    assert stats.positions_computed == 12 + 7 * 3
    assert stats.positions_needed == 9 + (2 + 7 + 4)
    assert stats.positions_wasted == 3 + 5 + 3


def test_cancelling_one_row_leaves_the_others_alone(tiny: Recording) -> None:
    prompts = [[464, 6355, 314], [4118, 100], [7, 8, 9, 10, 11]]
    params = [SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)] * 3
    cancels = [threading.Event() for _ in prompts]
    rows: list[list[TokenEvent]] = [[], [], []]
    for k, step in enumerate(tiny.stream_batch(prompts, params, cancels)):
        for row, e in enumerate(step):
            if e is not None:
                rows[row].append(e)
        if k == 2:
            cancels[1].set()  # the client of row 1 went away after 3 tokens
    assert rows[1][-1].finish_reason == "abort" and len(rows[1]) == 4  # 3 tokens, then abort
    assert all(e.finish_reason is None for e in rows[1][:-1])
    for row in (0, 2):
        assert [e.token_id for e in rows[row]] == tiny.generate(prompts[row], params[row]).output_ids


def test_every_row_cancelled_ends_the_batch(tiny: Recording) -> None:
    cancels = [threading.Event(), threading.Event()]
    stats = BatchStats()
    stream = tiny.stream_batch([[1, 2], [3]], [SamplingParams(max_tokens=50, ignore_eos=True)] * 2, cancels, stats)
    next(stream)
    for c in cancels:
        c.set()
    last = next(stream)
    assert [e.finish_reason for e in last] == ["abort", "abort"]
    assert list(stream) == [] and stats.forward_passes == 1


def test_the_cache_grows_only_as_far_as_the_batch_went(tiny: Recording) -> None:
    """max_tokens far beyond what is used must not be allocated up front."""
    engine = EosAt(tiny.loaded, eos_at={0: 3})
    out = engine.generate_batch([[464, 6355, 314]], SamplingParams(temperature=0.0, max_tokens=400))
    per_slot = 2 * 2 * 2 * 16 * 4  # K and V x layers x KV heads x head_dim x float32 bytes
    assert out[0].finish_reason == "stop" and len(out[0].output_ids) == 3
    assert out[0].metrics.kv_cache_bytes <= 12 * per_slot


def test_bad_batches_are_refused_with_clear_errors(tiny: Recording) -> None:
    with pytest.raises(ValueError, match="2 prompts but 1 SamplingParams"):
        tiny.generate_batch([[1], [2]], [GREEDY])
    with pytest.raises(ValueError, match="as many SamplingParams"):
        list(tiny.stream_batch([[1], [2]], [GREEDY]))
    with pytest.raises(ValueError, match="cancel events"):
        list(tiny.stream_batch([[1]], [GREEDY], [None, None]))
    with pytest.raises(PromptTooLongError, match="empty"):
        tiny.generate_batch([[1, 2], []], GREEDY)
    with pytest.raises(PromptTooLongError, match="exceeds the model's context"):
        tiny.generate_batch([[1, 2], [5] * 500], SamplingParams(max_tokens=100))
    assert tiny.generate_batch([], GREEDY) == []


def test_text_prompts_and_one_shared_params(tiny: Recording) -> None:
    texts = ["The capital of France is", "Hi"]
    out = tiny.generate_batch(texts, GREEDY)
    assert [r.output_ids for r in out] == [tiny.generate(t, GREEDY).output_ids for t in texts]
    assert out[0].provenance["engine"] == "Recording" and out[0].metrics.extra["batch_size"] == 2
    assert out[1].metrics.extra["padding_positions"] == len(tiny.encode(texts[0])) - len(tiny.encode(texts[1]))


# ---- the real model -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> Recording:
    return Recording(load_model())


def test_real_model_rows_equal_solo_runs(real: Recording) -> None:
    questions = ["Hi", "What is the capital of France?", "Write a haiku about bees, then explain it line by line.",
                 "List three prime numbers."]
    prompts = [real.apply_chat_template([{"role": "user", "content": q}]) for q in questions]
    params = SamplingParams(temperature=0.0, max_tokens=16)
    assert_rows_equal_solo(real, prompts, [params] * len(prompts))


def test_real_model_seeded_rows_equal_solo_runs(real: Recording) -> None:
    prompts = [real.encode("According to all known laws of aviation"), real.encode("Once upon a time")]
    params = [SamplingParams(temperature=0.8, top_p=0.95, max_tokens=12, ignore_eos=True, seed=s) for s in (1, 2)]
    assert_rows_equal_solo(real, prompts, params)


def test_the_batch_cache_keeps_chapter_4s_guard_and_skips_padding(tiny: Recording) -> None:
    cache = BatchKVCache.for_model(tiny.model, rows=2, capacity=3, limit=6)
    ids, positions = left_pad([[5, 6, 7], [8]], pad_id=0)
    with torch.inference_mode():
        tiny.model(ids, positions, cache)
        assert cache.lengths.tolist() == [3, 1]  # padding is counted nowhere
        tiny.model(torch.tensor([[9], [9]]), torch.tensor([[3], [-1]]), cache)  # row 1 finished
        assert cache.lengths.tolist() == [4, 1] and cache.capacity == 6  # grew (doubling, capped)
        with pytest.raises(CacheMisuseError, match="row 1 holds 1 positions"):
            tiny.model(torch.tensor([[9], [9]]), torch.tensor([[4], [2]]), cache)  # row 1 skips 1
        with pytest.raises(CacheMisuseError, match="limit of 6"):
            tiny.model(torch.tensor([[9, 9, 9]] * 2), torch.tensor([[4, 5, 6], [-1, -1, -1]]), cache)
