"""Chapter 2's engine on the tiny random model: stop conditions and finish reasons, stop strings split
across tokens, UTF-8-safe streaming, min_tokens, seeds, positions processed and the timing
partition. A `ScriptedEngine` (chapter 2 with its `forward` hook replaced) makes the "model" say
exactly the tokens a test needs."""

from __future__ import annotations

import math

import pytest
import torch

from chapters.ch02_generate_loop.engine import GenerateLoopEngine, Sequence
from chapters.ch02_generate_loop.sampling import ReferenceSampler, derive_seed, naive_seed
from shared.contracts import SamplingParams
from shared.engine import PromptTooLongError
from shared.model import LoadedModel, tiny_model

EOS = 2


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return tiny_model(seed=0)


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> GenerateLoopEngine:
    return GenerateLoopEngine(tiny)


class ScriptedEngine(GenerateLoopEngine):
    """A "model" whose logits at output step t peak at script[t]; with no script, all logits are
    equal (so a sampled token depends only on the step's random number)."""

    def __init__(self, loaded: LoadedModel, script: list[int] | None = None) -> None:
        super().__init__(loaded)
        self.script = script
        self.vocab = loaded.model.config.vocab_size

    def new_sequence(self, prompt_ids: list[int], *args: object) -> Sequence:
        self.prompt_len = len(prompt_ids)
        return super().new_sequence(prompt_ids, *args)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(input_ids.shape[0], self.vocab)
        if self.script:
            step = input_ids.shape[1] - self.prompt_len
            logits[:, self.script[step % len(self.script)]] = 10.0
        return logits


def scripted(tiny: LoadedModel, text_or_ids: str | list[int]) -> ScriptedEngine:
    ids = text_or_ids if isinstance(text_or_ids, list) else tiny.tokenizer.encode(
        text_or_ids, add_special_tokens=False)
    return ScriptedEngine(tiny, ids)


GREEDY = SamplingParams(temperature=0.0, max_tokens=16)


# ---- stop conditions ----------------------------------------------------------------------------


def test_eos_stops_unless_ignore_eos(tiny: LoadedModel) -> None:
    a, b, c = 19556, 6693, 44  # "Hello", "world", "<"
    eng = scripted(tiny, [a, b, EOS, c])
    r = eng.generate([1, 2, 3], GREEDY)
    assert (r.output_ids, r.finish_reason, r.text) == ([a, b], "stop", "Helloworld")
    r = eng.generate([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    assert (r.output_ids, r.finish_reason) == ([a, b, EOS, c], "length")


def test_min_tokens_masks_eos(tiny: LoadedModel) -> None:
    eng = scripted(tiny, [19556, EOS])
    r = eng.generate([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=6, min_tokens=4))
    assert EOS not in r.output_ids[:4] and len(r.output_ids) >= 4
    # After min_tokens the script's EOS is allowed again and ends the request.
    assert r.finish_reason == "stop"


def test_max_tokens_gives_length(engine: GenerateLoopEngine) -> None:
    r = engine.generate([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True))
    assert (len(r.output_ids), r.metrics.output_tokens, r.finish_reason) == (5, 5, "length")


def test_stop_string_split_across_tokens_is_never_emitted(tiny: LoadedModel) -> None:
    # "Hello" "<" "END" ">" "world": the stop string spans three tokens.
    eng = scripted(tiny, "Hello<END>world")
    params = SamplingParams(temperature=0.0, max_tokens=10, stop=["<END>"])
    deltas = [e.text for e in eng.stream(eng.encode("Hi"), params)]
    assert "".join(deltas) == "Hello"
    assert not any("<" in d for d in deltas)
    r = eng.generate("Hi", params)
    assert (r.text, r.finish_reason) == ("Hello", "stop")
    # A prefix of a stop string that does not complete it is released, not lost.
    r = scripted(tiny, "a<EN b").generate("Hi", SamplingParams(temperature=0.0, max_tokens=4,
                                                                stop=["<END>"]))
    assert r.text == "a<EN b" and r.finish_reason == "length"


def test_streaming_never_splits_a_multibyte_character(tiny: LoadedModel) -> None:
    text = " bee 🐝 buzz 日本"  # the emoji and 日 are each split over several byte-level tokens
    eng = scripted(tiny, text)
    n = len(eng.script)
    events = list(eng.stream(eng.encode("Hi"), SamplingParams(temperature=0.0, max_tokens=n)))
    deltas = [e.text for e in events]
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)
    assert "" in deltas[:-1]  # some tokens completed no character: their text was held back
    assert "🐝" in deltas


# ---- metrics -----------------------------------------------------------------------------------


def test_positions_processed_and_timing_partition(engine: GenerateLoopEngine) -> None:
    prompt = list(range(100, 117))  # 17 tokens
    r = engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True))
    m = r.metrics
    # No cache: step t runs 17 + t positions. 32 tokens cost 17*32 + (0+1+...+31) = 1040.
    assert m.positions_processed == sum(17 + t for t in range(32)) == 1040
    assert m.forward_ms > 0 and m.selection_ms > 0 and m.other_ms >= 0
    assert math.isclose(m.forward_ms + m.selection_ms + m.other_ms, m.total_ms, abs_tol=1e-6)
    assert 0 < m.ttft_ms < m.total_ms and 0 < m.tpot_ms < m.total_ms
    assert {"ttft_ms", "tpot_ms", "positions_processed", "forward_ms"} <= set(m.as_dict())


def test_provenance_names_the_loop_and_sampler(engine: GenerateLoopEngine) -> None:
    prov = engine.generate([1, 2, 3], SamplingParams(max_tokens=1)).provenance
    assert (prov["engine"], prov["implementation"], prov["sampler"]) == (
        "GenerateLoopEngine", "transformers.forward", "ch02.torch")


def test_prompt_that_does_not_fit_is_refused(engine: GenerateLoopEngine) -> None:
    with pytest.raises(PromptTooLongError, match="exceeds the model's context of 512"):
        engine.generate(list(range(500)), SamplingParams(max_tokens=20))
    with pytest.raises(ValueError, match="prompt is empty"):
        engine.generate([], SamplingParams(max_tokens=2))


# ---- seeds -------------------------------------------------------------------------------------

SAMPLED = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, max_tokens=8, ignore_eos=True)


def test_seeded_requests_repeat_and_unseeded_ones_record_their_seed(engine: GenerateLoopEngine) -> None:
    first = engine.generate([5, 6, 7], SAMPLED)
    seed = first.metrics.extra["seed"]
    again = engine.generate([5, 6, 7], SamplingParams(**{**SAMPLED.__dict__, "seed": seed}))
    assert again.output_ids == first.output_ids
    other = engine.generate([5, 6, 7], SamplingParams(**{**SAMPLED.__dict__, "seed": seed + 1}))
    assert other.output_ids != first.output_ids
    assert "seed" not in engine.generate([5, 6, 7], GREEDY).metrics.extra  # greedy draws nothing


def test_reference_and_torch_samplers_agree_inside_the_engine(tiny: LoadedModel) -> None:
    """The differential test again, on a model's real logits, over several requests."""
    ref = GenerateLoopEngine(tiny, sampler=ReferenceSampler())
    vec = GenerateLoopEngine(tiny)
    prompts = [[5, 6, 7], [100, 200], [9] * 5]
    params = [SamplingParams(**{**SAMPLED.__dict__, "seed": s}) for s in (1, 2, 3)]
    params[2] = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True, seed=3)
    expected = [r.output_ids for r in ref.generate_batch(prompts, params)]
    assert [r.output_ids for r in vec.generate_batch(prompts, params)] == expected


class NaiveSeedEngine(ScriptedEngine):
    """Chapter 2 with the `seed + step` scheme: the bug the hash fixes."""

    def select(self, logits: torch.Tensor, params: SamplingParams, seed: int | None, step: int) -> int:
        return self.token_sampler.sample(logits, params, naive_seed(seed, step))


@pytest.mark.parametrize("cls,aliased", [(NaiveSeedEngine, True), (ScriptedEngine, False)])
def test_distinct_requests_draw_distinct_streams(tiny: LoadedModel, cls: type, aliased: bool) -> None:
    """With flat logits each token is a function of the step's random number alone, so two
    requests whose streams alias produce the same tokens shifted by one step."""
    eng = cls(tiny)
    params = [SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True, seed=s) for s in (1, 2)]
    one, two = (r.output_ids for r in eng.generate_batch([[5, 6, 7], [5, 6, 7]], params))
    assert (two[:-1] == one[1:]) is aliased


def test_derive_seed_is_what_the_engine_uses(engine: GenerateLoopEngine) -> None:
    logits = torch.randn(engine.loaded.model.config.vocab_size)
    params = SamplingParams(temperature=1.0, seed=42)
    expected = engine.token_sampler.sample(logits, params, derive_seed(42, 3))
    assert engine.select(logits, params, 42, 3) == expected


# ---- through the shared server -----------------------------------------------------------------


def test_server_reports_the_new_metrics(engine: GenerateLoopEngine) -> None:
    """The unchanged server serves chapter 2: its `metrics` object, next to `usage`, now carries
    TTFT, TPOT, positions processed and the time split; a sampled request without a seed gets
    its seed back."""
    from fastapi.testclient import TestClient

    from shared.server import make_app

    with TestClient(make_app(engine)) as client:
        body = client.post("/v1/completions", json={
            "prompt": "Hello there", "max_tokens": 4, "temperature": 0, "ignore_eos": True}).json()
        assert body["usage"]["completion_tokens"] == 4
        m = body["metrics"]
        n = body["usage"]["prompt_tokens"]
        assert m["positions_processed"] == sum(n + t for t in range(4))
        assert {"ttft_ms", "tpot_ms", "forward_ms", "selection_ms", "other_ms"} <= set(m)
        sampled = client.post("/v1/completions", json={
            "prompt": "Hello there", "max_tokens": 4, "temperature": 0.8, "ignore_eos": True}).json()
        seed = sampled["metrics"]["seed"]
        again = client.post("/v1/completions", json={
            "prompt": "Hello there", "max_tokens": 4, "temperature": 0.8, "ignore_eos": True,
            "seed": seed}).json()
        assert again["choices"][0]["text"] == sampled["choices"][0]["text"]
