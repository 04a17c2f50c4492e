"""05 — chapter 2's engine behind the shared OpenAI-compatible server.

The server is chapter 1's, unchanged (`shared/server.py`'s `make_app`); only the engine differs.
Responses now carry the metrics chapter 2 measures: ttft_ms, tpot_ms, positions_processed and the
forward/selection/other split.

From this folder, or from the repository root:

    uvicorn 05_server:app --port 8000
    uvicorn --app-dir chapters/ch02_generate_loop 05_server:app --port 8000

IFS_MODEL picks the model as `--model` does elsewhere (a .gguf file, a folder or a Hugging Face id);
unset, it is the default SmolLM2-135M-Instruct. Then, in another terminal:

    curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
      -d '{"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}'
"""

import os

from chapters.ch02_generate_loop.engine import GenerateLoopEngine
from shared.server import make_app

app = make_app(GenerateLoopEngine(os.environ.get("IFS_MODEL")))
