"""00 — the generation loop, written out: no `generate()`.

Chapter 1 handed the loop to Hugging Face. Here it is in five lines: run the model on every token
so far, take the last position's logits, pick the highest (greedy), append it, stop at EOS. The
model call is still Hugging Face's forward pass; what happens around it is now ours. With
`use_cache=False` every step runs the whole sequence again, prompt included: step t processes
prompt + t positions to make one token. The script counts them.

Run it:  python 00_loop.py            (from chapters/ch02_generate_loop/ or from the repo root)
         python 00_loop.py --prompt "The capital of France is" --max-tokens 20
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

loaded = load_model()
tokenizer, model = loaded.tokenizer, loaded.model

ids = tokenizer.encode(args.prompt)  # text -> token ids
prompt_len, positions = len(ids), 0
start = time.perf_counter()
with torch.inference_mode():
    for _ in range(args.max_tokens):
        logits = model(torch.tensor([ids]), use_cache=False).logits  # [1, len(ids), vocab]
        positions += len(ids)  # no cache: the whole sequence, every step
        next_id = int(logits[0, -1].argmax())  # greedy: the most likely next token
        if next_id == tokenizer.eos_token_id:
            break
        ids.append(next_id)
seconds = time.perf_counter() - start

new = len(ids) - prompt_len
print(args.prompt + tokenizer.decode(ids[prompt_len:]))
print(f"\n{new} tokens in {seconds:.2f} s = {new / seconds:.1f} tok/s; "
      f"{positions} positions processed for {new} new tokens ({positions / max(new, 1):.1f} per token)")
