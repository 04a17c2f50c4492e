"""04 — the baseline engine: Hugging Face `generate()` behind the book's contracts.

`00_start.py` called `generate()` and waited for the whole answer. A server needs more: tokens as
they are made (for streaming), stop strings, a way to abort a request whose client went away, and a
record of what produced the answer. `BaselineEngine` (chapters/ch01_baseline/engine.py) gives
`generate()` all of that by overriding a single method of `shared.engine.BaseOfflineEngine`:
`_generate_tokens`, which yields token ids. The base class does the rest, identically for every
chapter: detokenising, stop conditions, cancellation, metrics, and `GenerateResult`.

This script uses each entry point in turn: generate, stream (each event printed as it arrives),
generate_batch, cancellation, and provenance.

Run it:  python 04_engine.py
         python 04_engine.py --prompt "The capital of France is" --max-tokens 24
"""

import argparse
import threading
import time

from chapters.ch01_baseline.engine import BaselineEngine
from shared.config import PROMPT
from shared.contracts import SamplingParams

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--prompt", default=PROMPT)
parser.add_argument("--max-tokens", type=int, default=16)
parser.add_argument("--model", default=None, help="a .gguf path, a local folder or a Hugging Face id")
args = parser.parse_args()

engine = BaselineEngine(args.model)
greedy = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)

# ---- 1. generate: one request, one result -----------------------------------------------------------
result = engine.generate(args.prompt, greedy)
print(f"generate()\n  text          {result.text!r}\n  finish_reason {result.finish_reason}"
      f"\n  output_ids    {result.output_ids}\n  metrics       {result.metrics.as_dict()}")

# ---- 2. stream: the same request, event by event ----------------------------------------------------
# Each event carries the new token and the text it completed. The text can be empty: a token that
# ends in the middle of a UTF-8 character, or that may begin a stop string, is held back.
print("\nstream()  (ms since the request started, token id, text)")
start = time.perf_counter()
for event in engine.stream(engine.encode(args.prompt), greedy):
    ms = (time.perf_counter() - start) * 1000
    if event.finish_reason is None:
        print(f"  {ms:8.0f} ms  {event.token_id!s:>6}  {event.text!r}", flush=True)
    else:  # the last event: maybe a final token, and always the finish reason and metrics
        print(f"  {ms:8.0f} ms  {event.token_id!s:>6}  {event.text!r}  finish={event.finish_reason}"
              f"  {event.metrics.as_dict() if event.metrics else {}}")

# ---- 3. generate_batch: several requests, each with its own parameters -------------------------------
# Chapter 1 runs them one after another; chapter 5 overrides this with a real padded batch.
chat = engine.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
batch = engine.generate_batch(
    [args.prompt, args.prompt, chat],
    [
        SamplingParams(temperature=0.8, seed=1, max_tokens=args.max_tokens),
        SamplingParams(temperature=0.0, stop=[" example"], max_tokens=args.max_tokens),
        SamplingParams(temperature=0.0, max_tokens=args.max_tokens),  # a chat-templated prompt
    ],
)
print("\ngenerate_batch()  (sampled with seed 1; greedy with stop=' example' (not emitted); a chat-templated question)")
for r in batch:
    print(f"  {r.finish_reason:<7} {len(r.output_ids):>3} tokens  {r.text!r}")

# ---- 4. cancellation: how a server stops a request whose client disconnected -----------------------
cancel = threading.Event()
events = []
for event in engine.stream(engine.encode(args.prompt), SamplingParams(temperature=0.0, max_tokens=64), cancel):
    events.append(event)
    if len(events) == 3:
        cancel.set()  # in the server, this happens when the client goes away
print(f"\ncancelled after 3 tokens: {len(events) - 1} tokens, finish_reason={events[-1].finish_reason}")

# ---- 5. provenance: what produced these tokens ------------------------------------------------------
prov = engine.provenance()
manifest = prov.pop("model_manifest")
print("\nprovenance()")
for key, value in prov.items():
    print(f"  {key:<16} {value}")
for key in ("model", "source", "source_sha256", "weights", "parameters", "parameter_digest", "libraries"):
    print(f"  manifest.{key:<16} {manifest.get(key)}")
