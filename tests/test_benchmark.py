"""The benchmark harness on the tiny random-weight model: statistics on known inputs, token counts
taken from results, the results file and its provenance, the alternating comparison, and the
online path against a live uvicorn server (launched and stopped, no orphan left)."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterator

import pytest
import torch

from chapters.ch01_baseline.engine import BaselineEngine
from shared.benchmark import (
    compare_engines,
    comparison_table,
    launch_server,
    measure_request,
    offline_args,
    offline_main,
    online_args,
    online_main,
    run_load,
    run_offline,
    serve_table,
    single_stream_table,
)
from shared.benchmark.online import arrival_times, load_mode
from shared.benchmark.records import RequestRecord, summarize_records
from shared.contracts import RequestMetrics, SamplingParams
from shared.engine import BaseOfflineEngine
from shared.model import LoadedModel, tiny_model
from shared.stats import percentile, summarize

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return tiny_model()


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> BaselineEngine:
    return BaselineEngine(tiny)


class ScriptedEngine(BaseOfflineEngine):
    """Yields a fixed token sequence: three tokens, then EOS, whatever max_tokens says."""

    name = "scripted"

    def _generate_tokens(
        self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics
    ) -> Iterator[int]:
        yield from [100, 101, 102, self.eos_token_id, 103]


# ---- statistics --------------------------------------------------------------------------------


def test_percentiles_on_known_inputs() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5  # order does not matter; interpolated
    assert percentile(list(range(1, 12)), 90) == 10.0
    assert percentile([1, 2, 3, 4, 5], 0) == 1 and percentile([1, 2, 3, 4, 5], 100) == 5
    assert percentile(list(range(101)), 99) == 99.0
    assert percentile([7.0], 99) == 7.0
    assert math.isclose(percentile([0, 10], 99), 9.9)
    s = summarize([2, 4, 4, 4, 5, 5, 7, 9])
    assert s["count"] == 8 and s["mean"] == 5.0 and s["p50"] == 4.5
    assert math.isclose(s["std"], 2.138089935299395) and s["min"] == 2 and s["max"] == 9
    assert summarize([]) == {"count": 0}  # not measured is absent, never zero


@pytest.mark.parametrize("values, q", [([], 50), ([1.0], -1), ([1.0], 101)])
def test_percentile_rejects_bad_input(values: list[float], q: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile(values, q)


def test_tpot_and_summary_from_records() -> None:
    a = RequestRecord(0, input_tokens=5, output_tokens=10, e2e_ms=100.0, ttft_ms=10.0,
                      itl_ms=[10.0] * 9)
    b = RequestRecord(0, output_tokens=1, e2e_ms=50.0, ttft_ms=50.0)  # one token: no TPOT
    failed = RequestRecord(0, error="HTTP 503")
    assert a.tpot_ms == 10.0 and b.tpot_ms is None
    s = summarize_records([a, b, failed])
    assert (s["successful"], s["failed"], s["output_tokens"]) == (2, 1, 11)
    assert s["tpot_ms"]["count"] == 1 and s["itl_ms"]["count"] == 9


# ---- offline ----------------------------------------------------------------------------------


def test_token_counts_come_from_the_results(tiny: LoadedModel) -> None:
    scripted = ScriptedEngine(tiny)
    record = measure_request(scripted, scripted.encode("Hi"), SamplingParams(max_tokens=50))
    assert record.output_ids == [100, 101, 102] and record.output_tokens == 3  # not 50
    assert record.finish_reason == "stop" and record.reported["output_tokens"] == 3
    assert record.ttft_ms is not None and len(record.itl_ms) == 2
    result = run_offline(scripted, ["Hi"], SamplingParams(max_tokens=50), runs=2, warmup=0,
                         progress=False)
    assert [r["output_tokens"] for r in result.runs] == [3, 3]
    assert result.summary()["output_tokens"] == 6


def test_offline_measures_every_token(engine: BaselineEngine) -> None:
    result = run_offline(engine, ["The bee", "Hello"], GREEDY, runs=2, warmup=1, progress=False)
    assert len(result.records) == 4 and len(result.runs) == 2  # warm-up discarded
    for r in result.records:
        assert r.output_tokens == 6 == len(r.output_ids)
        assert len(r.itl_ms) == 5 and 0 < r.ttft_ms <= r.e2e_ms
    s = result.summary()
    assert s["ttft_ms"]["count"] == 4 and s["itl_ms"]["count"] == 20
    assert s["peak_memory_bytes"] > 0
    assert "ch01_baseline" in single_stream_table([result])


def test_compare_engines_alternates_and_checks_tokens(tiny: LoadedModel, engine: BaselineEngine) -> None:
    other = BaselineEngine(tiny)
    scripted = ScriptedEngine(tiny)
    cmp = compare_engines([engine, other, scripted], ["The bee"], GREEDY, runs=3, warmup=0,
                          labels=["a", "b", "c"], progress=False)
    # Rotating order: round r starts with engine r.
    assert [r["position_in_round"] for r in cmp.results[0].runs] == [0, 2, 1]
    assert [r["position_in_round"] for r in cmp.results[1].runs] == [1, 0, 2]
    assert cmp.speedup(0)["mean"] == 1.0 and cmp.speedup(1)["count"] == 3
    ratios = [b / a for a, b in zip(cmp.results[0].tokens_per_second, cmp.results[1].tokens_per_second)]
    assert math.isclose(cmp.speedup(1)["mean"], sum(ratios) / 3)
    assert cmp.same_tokens(1) and not cmp.same_tokens(2)
    table = comparison_table(cmp)
    assert "speed-up vs a" in table and "NO" in table
    doc = cmp.as_dict()
    assert [c["same_tokens_as_reference"] for c in doc["comparison"]] == [True, True, False]
    json.dumps(doc)  # serialisable as it is


def test_compare_engines_rejects_bad_input(engine: BaselineEngine) -> None:
    with pytest.raises(ValueError, match="at least one engine"):
        compare_engines([], ["x"], GREEDY)
    with pytest.raises(ValueError, match="at least one prompt"):
        compare_engines([engine], [], GREEDY)
    with pytest.raises(ValueError, match="runs"):
        compare_engines([engine], ["x"], GREEDY, runs=0)
    with pytest.raises(ValueError, match="labels"):
        compare_engines([engine, engine], ["x"], GREEDY, labels=["same", "same"])


def test_results_json_has_provenance(engine: BaselineEngine, tmp_path, capsys) -> None:
    args = offline_args(argv=["--runs", "1", "--tokens", "4", "--warmup", "0", "--out",
                              str(tmp_path), "--notes", "test run"])
    offline_main(args, [engine], name="bench_test")
    data = json.loads((tmp_path / "bench_test.json").read_text())
    assert (tmp_path / "bench_test.png").stat().st_size > 0
    prov = data["provenance"]
    assert len(prov["git"]["commit"]) == 40 and isinstance(prov["git"]["dirty"], bool)
    assert prov["machine"]["cpu"] and prov["machine"]["cpu_cores"] >= 1
    assert "load_average_end" in prov["machine"] and "torch_threads" in prov["machine"]
    assert prov["libraries"]["torch"] and prov["libraries"]["python"]
    assert prov["command"] and prov["timestamp"] and prov["notes"] == "test run"
    assert data["model"]["manifest_sha256"] == engine.loaded.manifest_sha256
    assert data["model"]["manifest"]["model"].startswith("tiny-random-llama")
    assert data["workload"]["params"]["max_tokens"] == 4 and data["workload"]["runs"] == 1
    assert data["engines"][0]["summary"]["output_tokens"] == 4
    assert "TTFT (ms)" in capsys.readouterr().out


def test_cli_rejects_bad_arguments() -> None:
    for argv in (["--tokens", "0"], ["--runs", "0"], ["--threads", "0"]):
        with pytest.raises(SystemExit):
            offline_args(argv=argv)
    for argv in (["--rate", "0"], ["--rate", "-1"], ["--num-requests", "0"], ["--concurrency", "1", "0"],
                 ["--rate", "2", "--max-concurrency", "0"], ["--warmup", "-1"]):
        with pytest.raises(SystemExit):
            online_args(argv=argv)


@pytest.mark.parametrize("kwargs, name", [({"num_requests": 0}, "num_requests"),
                                          ({"concurrency": 0}, "concurrency"),
                                          ({"rate": -1.0}, "request rate"),
                                          ({"rate": math.nan}, "request rate")])
def test_run_load_refuses_bad_arguments_before_contacting_the_server(kwargs, name: str) -> None:
    call = {"num_requests": 2, **kwargs}
    with pytest.raises(ValueError, match=name):  # the URL is never contacted: nothing listens there
        run_load("http://127.0.0.1:9", ["hi"], GREEDY, **call)


# ---- online -----------------------------------------------------------------------------------


def test_arrival_times() -> None:
    assert arrival_times(3, math.inf, 0) == [0.0, 0.0, 0.0]
    times = arrival_times(2000, 4.0, seed=1)
    assert times == arrival_times(2000, 4.0, seed=1) != arrival_times(2000, 4.0, seed=2)
    assert times[0] == 0.0 and all(b > a for a, b in zip(times, times[1:]))
    assert 0.9 < times[-1] / 1999 / 0.25 < 1.1  # mean gap ~ 1/rate
    with pytest.raises(ValueError, match="request rate"):
        arrival_times(3, 0.0, 0)
    assert load_mode(None, math.inf)["name"] == "sequential"
    assert load_mode(4, math.inf)["name"] == "concurrency 4"
    assert load_mode(2, 1.5)["name"] == "poisson 1.5 req/s, at most 2 in flight"
    with pytest.raises(ValueError, match="concurrency"):
        load_mode(0, math.inf)


TINY_APP = """
from chapters.ch01_baseline.engine import BaselineEngine
from shared.model import tiny_model
from shared.server import make_app

app = make_app(BaselineEngine(tiny_model()))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator:
    app_dir = tmp_path_factory.mktemp("tiny_app")
    (app_dir / "tiny_app.py").write_text(textwrap.dedent(TINY_APP))
    with launch_server("tiny_app:app", cwd=app_dir, env={"OMP_NUM_THREADS": "1"}) as s:
        yield s
    assert s.process.poll() is not None  # stopped on the way out: no orphan


@pytest.mark.parametrize("concurrency, rate", [(None, math.inf), (2, math.inf), (None, 20.0)])
def test_online_load_modes(server, concurrency: int | None, rate: float) -> None:
    result = run_load(server.url, ["The bee", "Hello"], GREEDY, num_requests=4,
                      concurrency=concurrency, rate=rate, warmup=0, progress=False)
    s = result.summary()
    assert s["successful"] == 4, [r.error for r in result.records]
    for r in result.records:
        assert r.output_tokens == 6 and r.reported["output_tokens_source"] == "usage"
        assert r.input_tokens > 0 and r.ttft_ms is not None and r.ttft_ms <= r.e2e_ms
        assert len(r.itl_ms) <= 5
    assert s["duration_s"] > 0 and s["output_throughput"] > 0
    starts = [r.start_s for r in result.records]
    if rate == 20.0:  # Poisson: sent at the seeded arrival times, not all at once
        assert starts[-1] >= arrival_times(4, 20.0, 0)[-1] - 0.01
    assert "Successful requests:" in serve_table(result)


def test_online_failures_are_recorded_not_raised(server) -> None:
    bad = SamplingParams(temperature=0.0, max_tokens=100_000)  # beyond the tiny context
    result = run_load(server.url, ["x"], bad, num_requests=1, warmup=0, progress=False)
    assert result.summary()["failed"] == 1 and "HTTP 400" in result.records[0].error


def test_online_main_against_a_url(server, tmp_path) -> None:
    args = online_args(argv=["--url", server.url, "--tokens", "3", "--num-requests", "2",
                             "--concurrency", "1", "--warmup", "0", "--out", str(tmp_path)])
    online_main(args, name="online_test")
    data = json.loads((tmp_path / "online_test.json").read_text())
    assert data["loads"][0]["summary"]["output_tokens"] == 6
    assert data["provenance"]["git"]["commit"] and data["server"] == "external"
    assert (tmp_path / "online_test.png").is_file()


def test_launch_server_stops_on_error_and_reports_a_bad_app(tmp_path) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('no model here')\n")
    with pytest.raises(RuntimeError, match="no model here"):
        with launch_server("broken:app", cwd=tmp_path, startup_timeout_s=60):
            pass


def test_launch_server_stops_the_server_when_the_caller_fails(tmp_path) -> None:
    (tmp_path / "hello.py").write_text(
        "from fastapi import FastAPI\napp = FastAPI()\napp.get('/health')(lambda: {'status': 'ok'})\n"
    )
    with pytest.raises(KeyError):
        with launch_server("hello:app", cwd=tmp_path) as s:
            raise KeyError("the benchmark failed")
    assert s.process.poll() is not None  # gone, although the block raised


def test_git_state_prefers_the_commit_the_gpu_call_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU machine's copy may hold a stale .git: the commit named by the sending command wins.
    from shared.benchmark.provenance import git_state

    monkeypatch.setenv("IFS_GIT_COMMIT", "6c9e511")
    monkeypatch.setenv("IFS_GIT_DIRTY", "0")
    assert git_state() == {"commit": "6c9e511", "dirty": False}
    monkeypatch.setenv("IFS_GIT_DIRTY", "1")
    assert git_state() == {"commit": "6c9e511", "dirty": True}
    monkeypatch.delenv("IFS_GIT_COMMIT")
    here = git_state()
    assert here["commit"] and len(here["commit"]) == 40  # this checkout's own HEAD


def test_script_parser_takes_the_run_options_and_refuses_bad_threads() -> None:
    from shared.benchmark.cli import parse_script, script_parser

    parser = script_parser("A numbered script.\n\nMore text.")
    parser.add_argument("--rounds", type=int, default=2)
    before = torch.get_num_threads()
    try:
        args, started = parse_script(parser, ["--threads", "1", "--notes", "quiet machine", "--rounds", "3"])
        assert (args.threads, args.rounds, args.model) == (1, 3, None)
        assert torch.get_num_threads() == 1
        assert started["notes"] == "quiet machine" and started["git"]["commit"]
    finally:
        torch.set_num_threads(before)
    with pytest.raises(SystemExit):
        parse_script(parser, ["--threads", "0"])
