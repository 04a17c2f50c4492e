"""05 — chapter 5's engine behind the shared server, with the request batcher in front of it.

The server is chapter 1's, unchanged (`shared/server.py`'s `make_app`), and so is its validation;
what changes is the runner between the server and the engine. `BatchingRunner` (batcher.py) waits
up to IFS_MAX_WAIT_MS milliseconds after a request arrives for others to join it, then runs up to
IFS_MAX_BATCH of them as one static batch, streaming each row to its own client. /health shows
the batches served (`batches`, `batch_size_max`); each response's `metrics` says the size of the
batch it rode in (`batch_size`) and how much left padding its row carried (`padding_positions`).

From this folder, or from the repository root:

    uvicorn 05_server:app --port 8000
    uvicorn --app-dir chapters/ch05_static_batching 05_server:app --port 8000
    IFS_MAX_BATCH=16 IFS_MAX_WAIT_MS=50 uvicorn 05_server:app --port 8000

IFS_MODEL picks the model as `--model` does elsewhere; unset, it is SmolLM2-135M-Instruct. Then
send several requests at once and watch them share a batch:

    for i in 1 2 3 4; do curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
      -d '{"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}' & done; wait
    curl -s localhost:8000/health
"""

import os

from chapters.ch05_static_batching.batcher import BatchingRunner
from chapters.ch05_static_batching.engine import StaticBatchEngine
from shared.server import make_app

MAX_BATCH = int(os.environ.get("IFS_MAX_BATCH", "8"))
MAX_WAIT_MS = float(os.environ.get("IFS_MAX_WAIT_MS", "20"))

app = make_app(BatchingRunner(StaticBatchEngine(os.environ.get("IFS_MODEL")),
                              max_batch=MAX_BATCH, max_wait_ms=MAX_WAIT_MS))
