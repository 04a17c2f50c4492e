"""Chapter 6's accounting, checked against independent counts: the FLOPs of every matmul against
torch's FlopCounterMode on the library model's real forward pass, the attention FLOPs against the
counter on chapter 3's attention arithmetic, the weight bytes against the parameter count; then the
shape of the ceilings and profiler results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import DynamicCache

from chapters.ch03_model.model import attend, causal_visibility
from chapters.ch06_profiling import ceilings, roofline, timeline
from chapters.ch06_profiling.roofline import ModelShape, count_ops, decode_ops, predict, prefill_ops
from shared.model import load_model, tiny_model

MATMULS = {"q_proj", "k_proj", "v_proj", "o_proj", "mlp_gate", "mlp_up", "mlp_down", "lm_head"}
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny():
    return tiny_model(seed=0, layers=3).model


def counted_flops(fn) -> int:
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        fn()
    return counter.get_total_flops()


def matmul_flops(ops: list[roofline.Op]) -> int:
    return sum(o.flops * o.count for o in ops if o.name in MATMULS)


def filled_cache(model, batch: int, context: int) -> DynamicCache:
    shape = ModelShape.from_config(model.config)
    cache = DynamicCache()
    for layer in range(shape.layers):
        cache.update(torch.randn(batch, shape.kv_heads, context, shape.head_dim),
                     torch.randn(batch, shape.kv_heads, context, shape.head_dim), layer)
    return cache


@pytest.mark.parametrize("batch,context", [(1, 7), (3, 20)])
def test_decode_matmul_flops_match_flop_counter(tiny, batch, context):
    """On a CPU the counter sees the linear layers (aten.mm) but not the CPU attention kernel, so
    this checks every projection, the MLP and the LM head; attention is checked below."""
    shape = ModelShape.from_config(tiny.config)
    cache = filled_cache(tiny, batch, context)
    ids = torch.randint(0, 1000, (batch, 1))
    key = roofline._cache_kwarg(tiny)
    measured = counted_flops(lambda: tiny(ids, use_cache=True, **{key: cache}))
    assert measured == matmul_flops(decode_ops(shape, batch, context, 4))


@pytest.mark.parametrize("tokens", [1, 9, 33])
def test_prefill_matmul_flops_match_flop_counter(tiny, tokens):
    shape = ModelShape.from_config(tiny.config)
    ids = torch.randint(0, 1000, (1, tokens))
    measured = counted_flops(lambda: tiny(ids, use_cache=False, logits_to_keep=1))
    assert measured == matmul_flops(prefill_ops(shape, tokens, 4))


@pytest.mark.parametrize("batch,new,context", [(1, 1, 50), (2, 1, 9), (1, 12, 12), (2, 5, 5)])
def test_attention_flops_match_flop_counter_on_chapter3_arithmetic(batch, new, context):
    s = ModelShape(layers=1, hidden=64, heads=6, kv_heads=2, head_dim=16, intermediate=32, vocab=10)
    q = torch.randn(batch, s.heads, new, s.head_dim)
    k = torch.randn(batch, s.kv_heads, context, s.head_dim)
    v = torch.randn_like(k)
    qpos = torch.arange(context - new, context).expand(batch, -1)
    visible = causal_visibility(qpos, torch.arange(context).expand(batch, -1))
    measured = counted_flops(lambda: attend(q, k, v, visible))
    (attention,) = [o for o in count_ops(s, batch, new, context, 4) if o.name == "attention"]
    assert measured == attention.flops


def test_real_model_shape_and_weight_bytes():
    """Every weight is read exactly once per decode step: the step's weight bytes equal the
    parameter count times the bytes per element (the tied embedding counted once, by the head)."""
    loaded = load_model(device="cpu")
    shape = ModelShape.from_config(loaded.model.config)
    assert shape == ModelShape()  # the defaults are SmolLM2-135M's sizes
    params = sum(p.numel() for p in loaded.model.parameters())
    for elem in (4, 2):
        ops = decode_ops(shape, 1, 1, elem)
        kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * elem  # one cached position
        assert roofline.totals(ops)["weight_bytes"] - kv == params * elem


def test_prediction_takes_the_binding_roof():
    ceil = {"matmul": {"flop_per_s": 100.0}, "memory_bandwidth": {"bytes_per_s": 10.0}}
    assert predict(roofline.Op("x", 1000, 10, 0, 1), ceil) == (10.0, "compute")
    assert predict(roofline.Op("y", 10, 1000, 0, 1), ceil) == (100.0, "memory")


def test_decode_is_memory_bound_and_long_prefill_matmuls_are_not():
    s = ModelShape()
    for op in decode_ops(s, 1, 256, 2):
        # ~1 FLOP per byte in bf16 (attention: 3, as 3 query heads share each KV head): far
        # below any machine's ridge point.
        assert op.intensity <= (3.0 if op.name == "attention" else 1.0)
    for op in prefill_ops(s, 1024, 2):
        if op.name in MATMULS - {"lm_head"}:
            assert op.intensity > 100  # k, v projections (192 wide) ~126; the rest more


def test_every_counted_op_has_a_measurable_callable():
    s = ModelShape(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=100)
    for batch, new, context in ((2, 1, 8), (1, 6, 6)):
        fns = roofline.op_callables(s, batch, new, context, "cpu", torch.float32, cold_bytes=1 << 16)
        names = [o.name for o in count_ops(s, batch, new, context, 4)]
        assert sorted(fns) == sorted(names)
        for fn in fns.values():
            fn()


def check_ceilings(c: dict) -> None:
    assert c["device"] and c["dtype"]
    assert c["memory_bandwidth"]["bytes_per_s"] > 0 and c["memory_bandwidth"]["bytes_moved"] > 0
    assert c["matmul"]["flop_per_s"] > 0 and c["matmul"]["flops"] == 2 * c["matmul"]["n"] ** 3
    ridge = c["matmul"]["flop_per_s"] / c["memory_bandwidth"]["bytes_per_s"]
    assert c["ridge_flop_per_byte"] == pytest.approx(ridge)
    assert c["op_overhead"]["per_op_s"] > 0
    assert {"loadavg_1m_before", "cpu_count", "torch_threads"} <= set(c["load"])


def test_ceilings_structure_quick():
    check_ceilings(ceilings.measure("cpu", quick=True))


def test_committed_cpu_ceilings_have_the_structure_and_provenance():
    c = json.loads((REPO / "results/cpu/ch06_ceilings.json").read_text())
    check_ceilings(c)
    assert not c["quick"]
    assert {"command", "machine", "libraries"} <= set(c["provenance"])
    # Files written before chapter 6 used the shared provenance name the commit "git_commit".
    assert "git" in c["provenance"] or "git_commit" in c["provenance"]


def test_timeline_counts_top_level_ops(tiny):
    steps = timeline.decode_steps(tiny, context=8, graph=False)
    summary = timeline.profile_steps(steps["ours_eager"], "cpu", steps=2, warmup=1)
    # 3 layers of norm, projections, rope, attention, MLP: dozens of ops, but not every nested one.
    assert 30 < summary["aten_ops_per_step"] < 400
    assert summary["wall_per_step_s"] > 0 and summary["matmul_cpu_self_s_per_step"] > 0


def test_gpu_tables_finds_the_chapters_benchmarks(tmp_path):
    from chapters.ch06_profiling import gpu_tables

    labels = [label for label, _ in gpu_tables.jobs(64, 32, tmp_path)]
    assert "ch01_baseline/offline" in labels and "ch01_baseline/online" in labels
    assert labels[-1] == "tour"
    for label, argv in gpu_tables.jobs(64, 32, tmp_path):
        assert argv[-2:] == ["--out", str(tmp_path)]  # every result lands where it is collected
        tokens = argv[argv.index("--tokens") + 1]
        assert tokens == ("32" if label.endswith("/online") else "64")
    chosen = [label for label, _ in gpu_tables.jobs(64, 32, tmp_path, only=["ch04", "ch01_baseline/on"])]
    assert chosen == ["ch04_kv_cache/offline", "ch01_baseline/online", "ch04_kv_cache/online"]


def test_gpu_tables_refuses_an_only_that_matches_nothing(tmp_path):
    from chapters.ch06_profiling import gpu_tables

    with pytest.raises(ValueError, match="matches none"):
        gpu_tables.jobs(64, 32, tmp_path, only=["ch99"])


def test_hf_sdpa_backends_refuses_too_few_tokens(capsys):
    from chapters.ch06_profiling import hf_sdpa_backends

    with pytest.raises(SystemExit):
        hf_sdpa_backends.main(["--tokens", "1"])
    assert "--tokens must be >= 2" in capsys.readouterr().err
