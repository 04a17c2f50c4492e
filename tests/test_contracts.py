"""SamplingParams refuses every bad value at construction, with a message naming the field;
RequestMetrics.as_dict() reports only what was measured."""

from __future__ import annotations

import math

import pytest

from shared.contracts import GenerateResult, RequestMetrics, SamplingParams

INVALID = [
    ("temperature", {"temperature": math.nan}),
    ("temperature", {"temperature": math.inf}),
    ("temperature", {"temperature": -math.inf}),
    ("temperature", {"temperature": -0.1}),
    ("temperature", {"temperature": 2.1}),
    ("temperature", {"temperature": "1"}),
    ("temperature", {"temperature": True}),
    ("temperature", {"temperature": None}),
    ("top_k", {"top_k": 0}),
    ("top_k", {"top_k": -2}),
    ("top_k", {"top_k": 1.5}),
    ("top_k", {"top_k": 5.0}),
    ("top_k", {"top_k": True}),
    ("top_k", {"top_k": "5"}),
    ("top_p", {"top_p": 0}),
    ("top_p", {"top_p": 0.0}),
    ("top_p", {"top_p": -0.5}),
    ("top_p", {"top_p": 1.1}),
    ("top_p", {"top_p": math.nan}),
    ("top_p", {"top_p": math.inf}),
    ("top_p", {"top_p": False}),
    ("max_tokens", {"max_tokens": 0}),
    ("max_tokens", {"max_tokens": -1}),
    ("max_tokens", {"max_tokens": "5"}),
    ("max_tokens", {"max_tokens": 5.0}),
    ("max_tokens", {"max_tokens": True}),
    ("max_tokens", {"max_tokens": None}),
    ("min_tokens", {"max_tokens": 4, "min_tokens": 5}),
    ("min_tokens", {"min_tokens": -1}),
    ("min_tokens", {"min_tokens": 1.0}),
    ("ignore_eos", {"ignore_eos": 1}),
    ("ignore_eos", {"ignore_eos": "true"}),
    ("stop", {"stop": ""}),
    ("stop", {"stop": [""]}),
    ("stop", {"stop": ["ok", ""]}),
    ("stop", {"stop": [1]}),
    ("stop", {"stop": None}),
    ("stop", {"stop": b"x"}),
    ("seed", {"seed": 2**64}),
    ("seed", {"seed": -(2**63) - 1}),
    ("seed", {"seed": 1.5}),
    ("seed", {"seed": "1"}),
    ("seed", {"seed": True}),
]


@pytest.mark.parametrize(("field", "kwargs"), INVALID, ids=[repr(kw) for _, kw in INVALID])
def test_invalid_values_are_rejected_with_the_field_named(field: str, kwargs: dict) -> None:
    with pytest.raises(ValueError, match=field) as info:
        SamplingParams(**kwargs)
    # The message shows the offending value too (stop's emptiness message has no value to show).
    if field != "stop" or kwargs["stop"] not in ("", [""], ["ok", ""]):
        assert repr(kwargs[field]) in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 0},
        {"temperature": 0.0},
        {"temperature": 2.0},
        {"temperature": 2},
        {"top_k": -1},
        {"top_k": 1},
        {"top_k": 49152},
        {"top_p": 1e-9},
        {"top_p": 1.0},
        {"top_p": 1},
        {"max_tokens": 1},
        {"max_tokens": 8192},
        {"max_tokens": 5, "min_tokens": 5},
        {"min_tokens": 0},
        {"ignore_eos": True},
        {"stop": "\n"},
        {"stop": ["a", "bc"]},
        {"stop": ()},
        {"seed": None},
        {"seed": 0},
        {"seed": 2**64 - 1},
        {"seed": -(2**63)},
    ],
    ids=repr,
)
def test_edge_values_are_accepted(kwargs: dict) -> None:
    params = SamplingParams(**kwargs)
    for key, value in kwargs.items():
        if key != "stop":
            assert getattr(params, key) == value


def test_stop_is_normalised_to_a_tuple() -> None:
    assert SamplingParams(stop="END").stop == ("END",)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")
    hash(SamplingParams(stop=["a"]))  # frozen and hashable: a tuple, not a list


def test_params_are_immutable() -> None:
    params = SamplingParams()
    with pytest.raises(AttributeError):
        params.temperature = 5.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "greedy"),
    [
        ({}, False),
        ({"temperature": 0.0}, True),
        ({"temperature": 0.7, "top_k": 1}, True),
        ({"temperature": 0.7, "top_k": 2}, False),
        ({"temperature": 0.7, "top_p": 1e-6}, False),  # tiny top_p is greedy in effect, not by rule
        ({"temperature": 1e-6}, False),
    ],
    ids=repr,
)
def test_is_greedy(kwargs: dict, greedy: bool) -> None:
    assert SamplingParams(**kwargs).is_greedy is greedy


def test_metrics_as_dict_omits_unmeasured_zeros() -> None:
    assert RequestMetrics().as_dict() == {}
    metrics = RequestMetrics(input_tokens=7, output_tokens=3, total_ms=12.34567, ttft_ms=0.0)
    metrics.extra["queue_ms"] = 1.5
    metrics.extra["unused"] = 0.0
    assert metrics.as_dict() == {"input_tokens": 7, "output_tokens": 3, "total_ms": 12.346, "queue_ms": 1.5}


def test_generate_result_as_dict_uses_the_metrics_view() -> None:
    metrics = RequestMetrics(input_tokens=2, output_tokens=1, total_ms=5.0)
    result = GenerateResult("hi", [42], "length", metrics, {"engine": "X"})
    assert result.as_dict() == {
        "text": "hi",
        "output_ids": [42],
        "finish_reason": "length",
        "metrics": {"input_tokens": 2, "output_tokens": 1, "total_ms": 5.0},
        "provenance": {"engine": "X"},
    }
