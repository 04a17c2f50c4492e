"""Online benchmarks: requests over HTTP to an OpenAI-compatible server, timed by the client.

Works against our own server (launched here with uvicorn and stopped in `finally`) or any
OpenAI-compatible `--url` (vLLM, llama.cpp's llama-server, SGLang), so the same numbers can be
taken from all of them. Requests stream (`stream: true`, `stream_options.include_usage`), so the
client sees each chunk arrive: TTFT and ITL are measured where a user would feel them, including
the server's queueing and HTTP overhead. Output tokens come from the server's `usage`.

Load modes, as in `vllm bench serve`:

* sequential: one request at a time (concurrency 1);
* fixed concurrency: C requests in flight, a new one sent as soon as one finishes;
* Poisson arrivals: requests sent at a mean rate of R per second, with exponentially distributed
  gaps drawn from a seeded generator (optionally capped at C in flight).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import requests
from tqdm.auto import tqdm

from shared import config
from shared.benchmark.records import RequestRecord, summarize_records
from shared.contracts import SamplingParams

Endpoint = Literal["completions", "chat"]


def free_port(host: str = config.SERVER_HOST) -> int:
    """A TCP port nobody is listening on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class LaunchedServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@contextlib.contextmanager
def launch_server(
    app_spec: str,
    port: int | None = None,
    cwd: str | os.PathLike[str] | None = None,
    host: str = config.SERVER_HOST,
    startup_timeout_s: float = 300.0,
    env: dict[str, str] | None = None,
) -> Iterator[LaunchedServer]:
    """Start `uvicorn app_spec` (e.g. "05_server:app", importable from `cwd`) on host:port, wait
    until GET /health answers 200, yield it, and stop it on the way out, whatever happened: no
    orphan server is left behind. Its output goes to a log file, quoted if it fails to start."""
    port = port or free_port(host)
    log = tempfile.NamedTemporaryFile(prefix="uvicorn-", suffix=".log", delete=False)
    cmd = [sys.executable, "-m", "uvicorn", app_spec, "--host", host, "--port", str(port),
           "--log-level", "warning"]
    process = subprocess.Popen(
        cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    server = LaunchedServer(f"http://{host}:{port}", process, Path(log.name))
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"server `{' '.join(cmd)}` exited with code {process.returncode} before "
                    f"answering /health; its log:\n{server.log_tail()}"
                )
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{server.url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"server `{' '.join(cmd)}` did not answer /health within {startup_timeout_s} s;"
                    f" its log:\n{server.log_tail()}"
                )
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()  # uvicorn shuts down gracefully on SIGTERM
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def server_models(url: str) -> list[dict[str, Any]]:
    response = requests.get(f"{url.rstrip('/')}/v1/models", timeout=10)
    response.raise_for_status()
    return response.json().get("data", [])


def request_payload(
    prompt: str, params: SamplingParams, model: str, endpoint: Endpoint
) -> dict[str, Any]:
    """An OpenAI request for `prompt`; vLLM's extensions (top_k, ignore_eos, min_tokens) only when
    they differ from the default, so servers that do not know them still accept the request."""
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat":
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    if params.top_k != -1:
        payload["top_k"] = params.top_k
    if params.ignore_eos:
        payload["ignore_eos"] = True
    if params.min_tokens:
        payload["min_tokens"] = params.min_tokens
    if params.stop:
        payload["stop"] = list(params.stop)
    if params.seed is not None:
        payload["seed"] = params.seed
    return payload


def stream_request(
    url: str, payload: dict[str, Any], record: RequestRecord, timeout_s: float = 600.0
) -> RequestRecord:
    """Send one streaming request and time it. TTFT is the first chunk carrying text; each later
    text chunk adds one ITL sample. Errors are recorded, not raised: a load test reports failures."""
    path = "/v1/chat/completions" if "messages" in payload else "/v1/completions"
    text: list[str] = []
    chunks = 0
    start = last = time.perf_counter()
    try:
        with requests.post(url.rstrip("/") + path, json=payload, stream=True, timeout=timeout_s) as r:
            if r.status_code != 200:
                record.error = f"HTTP {r.status_code}: {r.text[:300]}"
                return record
            for line in r.iter_lines():
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta", {}).get("content") if "delta" in choice else choice.get("text")
                    if delta:
                        now = time.perf_counter()
                        if record.ttft_ms is None:
                            record.ttft_ms = (now - start) * 1000
                        else:
                            record.itl_ms.append((now - last) * 1000)
                        last = now
                        chunks += 1
                        text.append(delta)
                    record.finish_reason = choice.get("finish_reason") or record.finish_reason
                if usage := chunk.get("usage"):
                    record.input_tokens = usage.get("prompt_tokens", 0)
                    record.output_tokens = usage.get("completion_tokens", 0)
                    record.reported["output_tokens_source"] = "usage"
                if metrics := chunk.get("metrics"):  # our server's non-standard metrics
                    record.reported.update(metrics)
    except (requests.RequestException, ValueError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
        return record
    record.e2e_ms = (time.perf_counter() - start) * 1000
    record.text = "".join(text)
    if "output_tokens_source" not in record.reported:
        # No usage from this server: text chunks are the best count there is, and we say so.
        record.output_tokens = chunks
        record.reported["output_tokens_source"] = "text chunks (server sent no usage)"
    return record


def arrival_times(num_requests: int, rate: float, seed: int) -> list[float]:
    """Send times in seconds from the start: all 0 for rate=inf, else a Poisson process."""
    if rate <= 0 or math.isnan(rate):
        raise ValueError(f"request rate must be > 0 (or inf), got {rate!r}")
    if math.isinf(rate):
        return [0.0] * num_requests
    rng = random.Random(seed)
    times, t = [], 0.0
    for _ in range(num_requests):
        times.append(t)
        t += rng.expovariate(rate)
    return times


@dataclass
class LoadResult:
    url: str
    mode: dict[str, Any]
    records: list[RequestRecord] = field(default_factory=list)
    duration_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        s = summarize_records(self.records)
        d = self.duration_s
        s.update(
            duration_s=d,
            request_throughput=s["successful"] / d if d else 0.0,
            output_throughput=s["output_tokens"] / d if d else 0.0,
            total_token_throughput=(s["input_tokens"] + s["output_tokens"]) / d if d else 0.0,
        )
        return s

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "mode": self.mode,
            "summary": self.summary(),
            "requests": [r.as_dict() for r in self.records],
        }


def load_mode(concurrency: int | None, rate: float) -> dict[str, Any]:
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
    if not rate > 0:  # checked here too, so run_load refuses it before it contacts the server
        raise ValueError(f"request rate must be > 0 (or inf), got {rate!r}")
    if math.isinf(rate):
        name = "sequential" if concurrency in (None, 1) else f"concurrency {concurrency}"
        return {"name": name, "concurrency": concurrency or 1, "request_rate": "inf"}
    cap = f", at most {concurrency} in flight" if concurrency else ""
    return {"name": f"poisson {rate:g} req/s{cap}", "concurrency": concurrency, "request_rate": rate}


def run_load(
    url: str,
    prompts: Sequence[str],
    params: SamplingParams,
    num_requests: int,
    concurrency: int | None = None,
    rate: float = math.inf,
    seed: int = 0,
    model: str | None = None,
    endpoint: Endpoint = "completions",
    warmup: int = config.WARMUP_RUNS,
    progress: bool = True,
) -> LoadResult:
    """Send `num_requests` requests (cycling through `prompts`) under one load mode; see the module
    docstring. rate=inf and no concurrency is sequential. `warmup` requests are sent first, one at
    a time, and discarded."""
    if num_requests < 1:
        raise ValueError(f"num_requests must be >= 1, got {num_requests!r}")
    if not prompts:
        raise ValueError("run_load needs at least one prompt")
    mode = load_mode(concurrency, rate)
    model = model or server_models(url)[0]["id"]
    payloads = [request_payload(prompts[i % len(prompts)], params, model, endpoint)
                for i in range(num_requests)]
    for i in range(warmup):
        stream_request(url, payloads[i % num_requests], RequestRecord(i))
    times = arrival_times(num_requests, rate, seed)
    # Unbounded Poisson load needs a thread per request in flight; a pool of `concurrency` workers
    # is exactly the concurrency limit (a request waiting for a worker has not been sent yet).
    workers = mode["concurrency"] or num_requests
    result = LoadResult(url, {**mode, "num_requests": num_requests, "seed": seed, "model": model,
                              "endpoint": endpoint})
    records = [RequestRecord(i % len(prompts)) for i in range(num_requests)]
    lock = threading.Lock()
    with tqdm(total=num_requests, desc=mode["name"], unit="req", disable=not progress, leave=False) as bar:

        def send(i: int) -> None:
            records[i].start_s = time.perf_counter() - t0
            stream_request(url, payloads[i], records[i])
            with lock:
                bar.update(1)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = []
            for i, at in enumerate(times):
                delay = t0 + at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                futures.append(pool.submit(send, i))
            for f in futures:
                f.result()
        result.duration_s = time.perf_counter() - t0
    result.records = records
    return result
