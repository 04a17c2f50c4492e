"""05 — chapter 4's engine behind the shared OpenAI-compatible server.

The server is chapter 1's (`shared/server.py`'s `make_app`), unchanged. Responses' `metrics` now
carry `kv_cache_bytes`, the cache the request held, and `positions_processed` falls from roughly
(prompt x tokens) to prompt + tokens.

From this folder, or from the repository root:

    uvicorn 05_server:app --port 8000
    uvicorn --app-dir chapters/ch04_kv_cache 05_server:app --port 8000

IFS_MODEL picks the model as `--model` does elsewhere (a .gguf file, a folder or a Hugging Face id);
unset, it is the default SmolLM2-135M-Instruct. Then, in another terminal:

    curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
      -d '{"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}'
"""

import os

from chapters.ch04_kv_cache.engine import KVCacheEngine
from shared.server import make_app

app = make_app(KVCacheEngine(os.environ.get("IFS_MODEL")))
