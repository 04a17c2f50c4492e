"""The benchmark harness every chapter uses: offline (engines in-process) and online (HTTP against
any OpenAI-compatible server). See DESIGN.md, "Benchmark harness".

    from shared.benchmark import compare_engines, comparison_table
    cmp = compare_engines([PreviousEngine(model), MyEngine(model)], [PROMPT], params, runs=3)
    print(comparison_table(cmp))   # both engines, the speed-up and its spread, tokens = reference
"""

from shared.benchmark.cli import offline_args, offline_main, online_args, online_main
from shared.benchmark.offline import (
    Comparison,
    OfflineResult,
    compare_engines,
    measure_request,
    peak_memory,
    run_offline,
)
from shared.benchmark.online import (
    LaunchedServer,
    LoadResult,
    free_port,
    launch_server,
    run_load,
    server_models,
    stream_request,
)
from shared.benchmark.provenance import provenance, results_dir, save_results
from shared.benchmark.records import RequestRecord, summarize_records
from shared.benchmark.report import (
    comparison_table,
    percentile_table,
    plot_load,
    plot_offline,
    serve_table,
    single_stream_table,
)

__all__ = [
    "Comparison", "LaunchedServer", "LoadResult", "OfflineResult", "RequestRecord",
    "compare_engines", "comparison_table", "free_port", "launch_server", "measure_request", "offline_args", "offline_main", "online_args", "online_main",
    "peak_memory", "percentile_table", "plot_load", "plot_offline", "provenance", "results_dir",
    "run_load", "run_offline", "save_results", "serve_table", "server_models",
    "single_stream_table", "stream_request", "summarize_records",
]
