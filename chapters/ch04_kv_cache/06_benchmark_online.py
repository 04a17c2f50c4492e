"""06 — chapter 4's server, online: the same HTTP benchmark as chapters 1-3, against 05_server.

Starts `uvicorn 05_server:app` from this folder on a free port, waits for /health, sends streaming
requests and stops the server when done, even on failure. By default --num-requests requests one at
a time, then 4 in flight (one request at a time is served; the others queue: chapter 5 batches
them). Prints a `vllm bench serve`-style table per load mode and writes
results/cpu/ch04_online.json.

    python 06_benchmark_online.py
    python chapters/ch04_kv_cache/06_benchmark_online.py --num-requests 8 --tokens 64 --threads 1
    python 06_benchmark_online.py --url http://localhost:8080 --name other_online   # any server

Compare with results/cpu/ch03_online.json: same server, same loop, same model, now with a cache.
"""

from pathlib import Path

from shared.benchmark import online_args, online_main

if __name__ == "__main__":
    args = online_args(__doc__)
    online_main(args, name="ch04_online", app_spec="05_server:app", app_dir=Path(__file__).parent)
