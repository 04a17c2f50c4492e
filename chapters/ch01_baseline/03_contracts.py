"""03 — the contracts: what a request asks for, what was measured, what comes back.

Every engine in this book, from chapter 1's wrapper around `generate()` to chapter 13's
speculative decoder, speaks the same three types from `shared/contracts.py`:

* `SamplingParams` — how to choose tokens and when to stop, with vLLM's names. It checks itself when
  constructed: a bad value raises a ValueError naming the field, so a bad value cannot exist, and no
  sampler, server or scheduler downstream has to defend against one.
* `RequestMetrics` — what was measured while serving one request. 0.0 means "not measured" and is
  left out of `as_dict()`, so an engine that cannot see inside `generate()` reports no made-up time
  to first token.
* `GenerateResult` — the text, the token ids, why it stopped, the metrics, and provenance: which
  engine, model, dtype and device made it.

No model is needed; this runs in a second.  Run it:  python 03_contracts.py
"""

from shared.contracts import GenerateResult, RequestMetrics, SamplingParams

# ---- SamplingParams: valid values -------------------------------------------------------------------
print("valid SamplingParams (greedy when temperature is 0 or top_k is 1):")
for params in (
    SamplingParams(),  # vLLM's defaults: temperature 1, no top-k, no top-p, 16 tokens
    SamplingParams(temperature=0.0, max_tokens=64),
    SamplingParams(temperature=0.8, top_k=1),
    SamplingParams(temperature=0.7, top_p=0.9, stop="\n\n", seed=42),  # one stop string -> a tuple
    SamplingParams(max_tokens=32, min_tokens=8, ignore_eos=True),
):
    print(f"  is_greedy={params.is_greedy!s:<5}  {params}")

# ---- SamplingParams: invalid values, each refused with a message naming the field -------------------
# Some of these look harmless: "1" and True are what a sloppy JSON client sends, 5.0 is what
# JavaScript sends for 5. Each is refused rather than guessed at.
INVALID: list[dict[str, object]] = [
    {"temperature": float("nan")},
    {"temperature": float("inf")},
    {"temperature": -0.1},
    {"temperature": 2.1},
    {"temperature": "1"},
    {"temperature": True},
    {"top_k": 0},
    {"top_k": -2},
    {"top_k": 1.5},
    {"top_p": 0.0},
    {"top_p": 1.1},
    {"max_tokens": 0},
    {"max_tokens": "5"},
    {"max_tokens": 5.0},
    {"max_tokens": True},
    {"max_tokens": 4, "min_tokens": 5},
    {"ignore_eos": "yes"},
    {"stop": ""},
    {"stop": [""]},
    {"stop": [1]},
    {"seed": 2**64},
    {"seed": 1.5},
]
print("\ninvalid SamplingParams, each rejected at construction:")
for kwargs in INVALID:
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    try:
        SamplingParams(**kwargs)  # type: ignore[arg-type]
    except ValueError as exc:
        print(f"  {shown:<30} -> {exc}")
    else:
        raise AssertionError(f"{shown} was accepted")

# ---- RequestMetrics: only what was measured ---------------------------------------------------------
# Illustrative values, not a measurement. Chapter 1's engine times the whole request but not its
# parts (time to first token, time per output token); as_dict() leaves those zeros out instead of
# reporting them as if they had been measured.
metrics = RequestMetrics(input_tokens=18, output_tokens=64, total_ms=2000.0, tokens_per_second=32.0)
print(f"\nRequestMetrics.as_dict(): {metrics.as_dict()}")
print(f"  fields left out because they are 0 (not measured): "
      f"{sorted(k for k, v in vars(metrics).items() if not v)}")

# ---- GenerateResult: what every engine returns -------------------------------------------------------
result = GenerateResult(  # illustrative, as above
    text=" It flies anyway.",
    output_ids=[1205, 25373, 6103, 30],
    finish_reason="stop",  # "stop" (EOS or a stop string), "length" (max_tokens) or "abort"
    metrics=metrics,
    provenance={"engine": "Example", "device": "cpu", "dtype": "float32"},
)
print(f"\nGenerateResult.as_dict(): {result.as_dict()}")
