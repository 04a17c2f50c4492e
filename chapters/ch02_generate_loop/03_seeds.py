"""03 — why the per-step seed is a hash: `seed + step` makes neighbouring requests share randomness.

A sampled request needs a fresh random number at every step, and the same seed must give the same
tokens again. The obvious scheme seeds step t of a request with `seed + t`. Then request 2's step 0
is seeded with 2, and so is request 1's step 1: request 2's random stream is request 1's, one step
later. Any client that numbers its seeds 1, 2, 3... (best-of-n does) gets correlated samples.

`derive_seed(seed, step)` hashes the pair instead (blake2b), so distinct (seed, step) pairs get
unrelated seeds. This script shows both schemes three ways: the per-step uniform numbers of
requests 1 and 2, the count of colliding (seed, step) pairs over 64 requests x 64 steps (the
regression test in tests/test_ch02_sampling.py requires zero), and a "model" that flips a fair coin
(two tokens with equal logits): with `seed + step`, request 2's flips are request 1's, shifted.
No model is loaded. Writes results/cpu/ch02_seeds.json.

Run it:  python 03_seeds.py
"""

import itertools

import torch

from chapters.ch02_generate_loop.sampling import TorchSampler, derive_seed, naive_seed, uniform
from shared.benchmark import provenance, save_results
from shared.contracts import SamplingParams

started = provenance()
SCHEMES = {"seed + step": naive_seed, "derive_seed (hash)": derive_seed}
STEPS = 8


def collisions(derive, requests: int = 64, steps: int = 64) -> int:
    """(seed, step) pairs whose per-step seed was already given to another pair."""
    values = [derive(s, t) for s, t in itertools.product(range(requests), range(steps))]
    return len(values) - len(set(values))


coin = torch.zeros(2)  # two tokens, equal logits: a fair coin
sampler, params = TorchSampler(), SamplingParams(temperature=1.0)
body: dict[str, dict] = {}
for name, derive in SCHEMES.items():
    u = {req: [uniform(derive(req, t)) for t in range(STEPS)] for req in (1, 2)}
    flips = {req: "".join("HT"[sampler.sample(coin, params, derive(req, t))] for t in range(24))
             for req in (1, 2)}
    body[name] = {"uniforms": u, "coin_flips": flips, "collisions_64x64": collisions(derive)}
    print(f"{name}")
    for req in (1, 2):
        print(f"  request seed={req}: u = " + " ".join(f"{x:.3f}" for x in u[req]))
    for req in (1, 2):
        print(f"  request seed={req}: coin flips {flips[req]}")
    print(f"  64 requests x 64 steps: {body[name]['collisions_64x64']} of 4096 per-step seeds "
          f"repeat another request's\n")

path = save_results("ch02_seeds", body, device="cpu", started=started)
print(f"wrote {path}")
