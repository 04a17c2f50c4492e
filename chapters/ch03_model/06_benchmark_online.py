"""06 — chapter 3's server, online: the same HTTP benchmark as chapters 1 and 2, against 05_server.

Starts `uvicorn 05_server:app` from this folder on a free port, waits for /health, sends streaming
requests and stops the server when done, even on failure. By default --num-requests requests one at
a time, then 4 in flight (one request at a time is served; the others queue). Prints a
`vllm bench serve`-style table per load mode and writes results/cpu/ch03_online.json.

    python 06_benchmark_online.py
    python chapters/ch03_model/06_benchmark_online.py --num-requests 4 --tokens 32 --threads 1
    python 06_benchmark_online.py --url http://localhost:8080 --name other_online   # any server

Compare with results/cpu/ch02_online.json: same server, same loop, another forward pass.
"""

from pathlib import Path

from shared.benchmark import online_args, online_main

if __name__ == "__main__":
    args = online_args(__doc__)
    online_main(args, name="ch03_online", app_spec="05_server:app", app_dir=Path(__file__).parent)
