"""Chapter 1's engine behind the shared OpenAI-compatible server.

From this folder, or from the repository root:

    uvicorn 05_server:app --port 8000
    uvicorn --app-dir chapters/ch01_baseline 05_server:app --port 8000

IFS_MODEL picks the model as `--model` does elsewhere (a .gguf file, a folder or a Hugging Face id);
unset, it is the default SmolLM2-135M-Instruct. Then, in another terminal:

    curl -s localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"messages": [{"role": "user", "content": "What is a bee?"}], "max_tokens": 32}'
"""

import os

from chapters.ch01_baseline.engine import BaselineEngine
from shared.server import make_app

app = make_app(BaselineEngine(os.environ.get("IFS_MODEL")))
