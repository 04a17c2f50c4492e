"""Chapter 8's engine behind the shared OpenAI-compatible server: only the engine is new (chapter
7's, with the flash kernel in the prefill). On a CPU it runs chapter 6's path, as chapter 7's does;
its provenance says so.

From this folder, or from the repository root:

    uvicorn 05_server:app --port 8000
    uvicorn --app-dir chapters/ch08_flash_attention 05_server:app --port 8000

IFS_MODEL picks the model as `--model` does elsewhere; unset, it is the default SmolLM2.
"""

import os

from chapters.ch08_flash_attention.engine import FlashAttentionEngine
from shared.server import make_app

app = make_app(FlashAttentionEngine(os.environ.get("IFS_MODEL")))
