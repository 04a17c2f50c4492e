"""05 — chapter 3's engine behind the shared OpenAI-compatible server.

The server is chapter 1's (`shared/server.py`'s `make_app`) and the loop is chapter 2's; only the
forward pass is new. `GET /v1/models` carries the provenance, whose `implementation` now reads
"ch03 hand-written Llama (PyTorch)".

From this folder, or from the repository root:

    uvicorn 05_server:app --port 8000
    uvicorn --app-dir chapters/ch03_model 05_server:app --port 8000

IFS_MODEL picks the model as `--model` does elsewhere (a .gguf file, a folder or a Hugging Face id);
unset, it is the default SmolLM2-135M-Instruct. Then, in another terminal:

    curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
      -d '{"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}'
"""

import os

from chapters.ch03_model.engine import ModelEngine
from shared.server import make_app

app = make_app(ModelEngine(os.environ.get("IFS_MODEL")))
