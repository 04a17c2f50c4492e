"""Chapter 7's engine behind the shared OpenAI-compatible server: only the engine is new. On a GPU
the first request of each cache size autotunes the Triton kernels (once per process) and captures
that size's graph, so its TTFT is higher than the next one's. On a CPU the engine runs chapter 6's
path (the Triton interpreter would take seconds per token on this model); its provenance says so.

From this folder, or from the repository root:

    uvicorn 05_server:app --port 8000
    uvicorn --app-dir chapters/ch07_triton 05_server:app --port 8000

IFS_MODEL picks the model as `--model` does elsewhere; unset, it is the default SmolLM2.
"""

import os

from chapters.ch07_triton.engine import TritonEngine
from shared.server import make_app

app = make_app(TritonEngine(os.environ.get("IFS_MODEL")))
