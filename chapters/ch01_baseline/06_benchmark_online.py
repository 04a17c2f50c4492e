"""Chapter 1's online benchmark: our server over HTTP, timed by the client.

Starts `uvicorn 05_server:app` from this folder on a free port, waits for /health, sends streaming
requests (`stream_options.include_usage`) and stops the server when done, even on failure. By
default it runs --num-requests requests one at a time, then with 4 in flight (chapter 1 serves one
request at a time, so the others queue: watch TTFT grow). --rate runs Poisson arrivals instead.
Prints a `vllm bench serve`-style table per load mode and writes results/cpu/ch01_online.json.

    python 06_benchmark_online.py
    python chapters/ch01_baseline/06_benchmark_online.py --concurrency 1 2 8 --num-requests 16
    python 06_benchmark_online.py --rate 0.5 1 --num-requests 20
    python 06_benchmark_online.py --url http://localhost:8080 --name llamacpp_online   # any server
"""

from pathlib import Path

from shared.benchmark import online_args, online_main

if __name__ == "__main__":
    args = online_args(__doc__)
    online_main(args, name="ch01_online", app_spec="05_server:app", app_dir=Path(__file__).parent)
