"""The command lines of every chapter's 06_benchmark_offline.py and 06_benchmark_online.py, so a
chapter's script only says which engines (or which server) to measure.

    args = offline_args(__doc__)
    engines = [PreviousEngine(args.model), MyEngine(args.model)]
    offline_main(args, engines, name="ch04_offline")
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from typing import Any

import torch

from shared import config
from shared.benchmark.offline import compare_engines
from shared.benchmark.online import LoadResult, launch_server, run_load, server_models
from shared.benchmark.provenance import provenance, save_results
from shared.benchmark.report import (
    comparison_table,
    percentile_table,
    plot_load,
    plot_offline,
    serve_table,
    single_stream_table,
)
from shared.contracts import SamplingParams
from shared.engine import BaseOfflineEngine


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """The options every measuring script takes: which model, how many CPU threads, and notes."""
    p.add_argument("--model", default=None,
                   help="a .gguf file, a model folder or a Hugging Face id (default: SmolLM2-135M)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: torch's choice, usually one per core)")
    p.add_argument("--notes", default="", help="free text stored with the results")


def _apply_threads(p: argparse.ArgumentParser, threads: int | None) -> None:
    if threads is not None:
        if threads < 1:
            p.error(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)


def script_parser(description: str | None) -> argparse.ArgumentParser:
    """A numbered script's parser, with --model, --threads and --notes already on it."""
    p = argparse.ArgumentParser(description=description.splitlines()[0] if description else None)
    _add_run_options(p)
    return p


def parse_script(p: argparse.ArgumentParser,
                 argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse a `script_parser`'s arguments, set torch's threads, and take the provenance now, as the
    run starts (its load average is the one that describes the measurement)."""
    args = p.parse_args(argv)
    _apply_threads(p, args.threads)
    return args, provenance(args.notes)


def _common_args(description: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_run_options(p)
    p.add_argument("--prompt", action="append",
                   help="a prompt (repeat for several; default: the seed book's bee prompt)")
    p.add_argument("--tokens", type=int, default=config.BENCHMARK_TOKENS,
                   help="output tokens per request (default %(default)s)")
    p.add_argument("--stop-at-eos", action="store_true",
                   help="stop at EOS (default: ignore EOS so every request makes --tokens tokens)")
    p.add_argument("--warmup", type=int, default=config.WARMUP_RUNS,
                   help="warm-up runs, discarded (default %(default)s)")
    p.add_argument("--name", default=None, help="results file name, without .json")
    p.add_argument("--out", default=None, help="results folder (default: $OUT or results/cpu|gpu)")
    p.add_argument("--no-save", action="store_true", help="print only; write no files")
    return p


def parse(p: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check the common arguments; sets torch's thread count and builds `args.params`
    (greedy) and `args.prompts`."""
    args = p.parse_args(argv)
    if args.tokens < 1:
        p.error(f"--tokens must be >= 1, got {args.tokens}")
    _apply_threads(p, args.threads)
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    if getattr(args, "runs", 1) < 1:
        p.error(f"--runs must be >= 1, got {args.runs}")
    args.prompts = args.prompt or [config.PROMPT]
    args.params = SamplingParams(temperature=0.0, max_tokens=args.tokens,
                                 ignore_eos=not args.stop_at_eos)
    return args


def offline_parser(description: str | None = None) -> argparse.ArgumentParser:
    p = _common_args(description)
    p.add_argument("--runs", type=int, default=config.BENCHMARK_RUNS,
                   help="measured runs per engine (default %(default)s)")
    return p


def offline_args(description: str | None = None, argv: Sequence[str] | None = None) -> argparse.Namespace:
    return parse(offline_parser(description), argv)


def offline_main(
    args: argparse.Namespace,
    engines: Sequence[BaseOfflineEngine],
    name: str,
    labels: Sequence[str] | None = None,
    compare: bool | None = None,
) -> dict[str, Any]:
    """Measure `engines` alternately (greedy, the same prompts), print the tables (the comparison
    table too when `compare`, by default when there are several engines), and save the JSON and a
    plot. Returns the results document."""
    started = provenance(args.notes)
    cmp = compare_engines(engines, args.prompts, args.params, args.runs, args.warmup, labels)
    print(single_stream_table(cmp.results))
    for r in cmp.results:
        print(f"\n{r.label}: every request of every run")
        print(percentile_table(r.summary()))
    if compare if compare is not None else len(engines) > 1:
        print()
        print(comparison_table(cmp))
    body = cmp.as_dict()
    if not args.no_save:
        name = args.name or name
        prov = cmp.results[0].provenance
        path = save_results(
            name, body, device=prov["device"], notes=args.notes, out_dir=args.out, started=started,
            model={"manifest": prov["model_manifest"], "manifest_sha256": prov["manifest_sha256"]},
        )
        plot = plot_offline(cmp.results, path.with_suffix(".png"), title=f"{name}: {_subtitle(started)}")
        print(f"\nwrote {path} and {plot}")
    return body


def online_args(description: str | None = None, argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = _common_args(description)
    p.add_argument("--url", default=None,
                   help="measure this OpenAI-compatible server instead of launching ours")
    p.add_argument("--served-model", default=None,
                   help="the `model` field to send (default: the server's first /v1/models entry)")
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--num-requests", type=int, default=8, help="requests per load mode")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4],
                   help="fixed-concurrency modes to run, 1 = sequential (default: 1 4)")
    p.add_argument("--rate", type=float, nargs="+", default=None,
                   help="Poisson request rates (req/s) to run instead of the concurrency modes")
    p.add_argument("--max-concurrency", type=int, default=None,
                   help="with --rate: at most this many requests in flight")
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrival times")
    p.add_argument("--port", type=int, default=None, help="port for our server (default: a free one)")
    args = parse(p, argv)
    if args.num_requests < 1:
        p.error(f"--num-requests must be >= 1, got {args.num_requests}")
    if any(c < 1 for c in args.concurrency):
        p.error(f"--concurrency values must be >= 1, got {args.concurrency}")
    if args.rate is not None and any(not (r > 0) for r in args.rate):
        p.error(f"--rate values must be > 0, got {args.rate}")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        p.error(f"--max-concurrency must be >= 1, got {args.max_concurrency}")
    return args


def _load_modes(args: argparse.Namespace) -> list[tuple[int | None, float]]:
    if args.rate:
        return [(args.max_concurrency, rate) for rate in args.rate]
    return [(c, math.inf) for c in args.concurrency]


def online_main(
    args: argparse.Namespace,
    name: str,
    app_spec: str | None = None,
    app_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Measure `args.url`, or else launch `uvicorn app_spec` from `app_dir` (with --model passed as
    IFS_MODEL and --threads as OMP_NUM_THREADS) and stop it afterwards. Runs each load mode, prints
    the tables, and saves the JSON and a plot."""
    started = provenance(args.notes)
    if args.url:
        return _online(args, args.url, name, started, server="external")
    if app_spec is None:
        raise ValueError("give app_spec (our server) or --url (any OpenAI-compatible server)")
    env = {}
    if args.model:
        env["IFS_MODEL"] = args.model
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    with launch_server(app_spec, args.port, cwd=app_dir, env=env) as server:
        return _online(args, server.url, name, started, server=f"uvicorn {app_spec}")


def _online(args: argparse.Namespace, url: str, name: str, started: dict[str, Any],
            server: str) -> dict[str, Any]:
    cards = server_models(url)
    model = args.served_model or cards[0]["id"]
    results: list[LoadResult] = []
    for concurrency, rate in _load_modes(args):
        results.append(run_load(url, args.prompts, args.params, args.num_requests, concurrency, rate,
                                args.seed, model, args.endpoint, args.warmup))
        print(serve_table(results[-1]))
        print()
    sequential = [r for r in results if r.mode["name"] == "sequential"]
    if sequential:
        print(single_stream_table(sequential))
    body = {"server": server, "url": url, "model_card": cards[0],
            "workload": {"prompts": args.prompts, "params": vars(args.params), "warmup": args.warmup},
            "loads": [r.as_dict() for r in results]}
    if not args.no_save:
        name = args.name or name
        prov = cards[0].get("provenance", {})
        device = prov.get("device") if server != "external" else None
        path = save_results(
            name, body, device=device, notes=args.notes, out_dir=args.out, started=started,
            model={"manifest": prov.get("model_manifest"), "manifest_sha256": prov.get("manifest_sha256")}
            if prov else {"served_model": model},
        )
        plot = plot_load(results, path.with_suffix(".png"), title=f"{name}: {_subtitle(started)}")
        print(f"\nwrote {path} and {plot}")
    return body


def _subtitle(prov: dict[str, Any]) -> str:
    m = prov["machine"]
    where = m.get("gpu") or f"{m['cpu']}, {m['cpu_cores']} cores, {m['torch_threads']} torch threads"
    load = m.get("load_average")
    busy = f"; load average {load[0]:.1f}" if load else ""
    return f"{where}{busy}; commit {str(prov['git']['commit'])[:8]}"

