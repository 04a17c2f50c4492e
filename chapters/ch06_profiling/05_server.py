"""Chapter 6's engine behind the shared OpenAI-compatible server. The server, its validation and
its runner are unchanged; only the engine is new. On a GPU the first request of each cache size
captures that size's graph (a few warm-up passes), so its TTFT is higher than the next one's.

From this folder, or from the repository root:

    uvicorn 05_server:app --port 8000
    uvicorn --app-dir chapters/ch06_profiling 05_server:app --port 8000

IFS_MODEL picks the model as `--model` does elsewhere; unset, it is the default SmolLM2.
"""

import os

from chapters.ch06_profiling.engine import CudaGraphEngine
from shared.server import make_app

app = make_app(CudaGraphEngine(os.environ.get("IFS_MODEL")))
