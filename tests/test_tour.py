"""The tour (`make run`): its chapter selection, its verdict, and one short run on the real model."""

from __future__ import annotations

import pytest
import torch

from shared import tour


def test_select_keeps_the_reference_first_and_refuses_unknown_chapters() -> None:
    assert [c for c, _ in tour.select(None)] == [c for c, _ in tour.TOUR]
    assert [c for c, _ in tour.select(["ch04_kv_cache"])] == ["ch01_baseline", "ch04_kv_cache"]
    with pytest.raises(ValueError, match="ch99"):
        tour.select(["ch99_nothing"])


def test_every_tour_entry_names_an_engine_class() -> None:
    for _, spec in tour.TOUR:
        assert callable(tour.engine_class(spec))


def test_verdict_fails_on_different_tokens_in_float32_only() -> None:
    assert tour.verdict("ch01", [], 3, torch.float32)[1] == 0
    assert tour.verdict("ch01", [], 3, torch.bfloat16)[1] == 0
    message, status = tour.verdict("ch01", ["ch04_kv_cache"], 3, torch.float32)
    assert status == 1 and message.startswith("FAIL") and "ch04_kv_cache" in message
    message, status = tour.verdict("ch01", ["ch04_kv_cache"], 3, torch.bfloat16)
    assert status == 0 and "bfloat16" in message and "ch04_kv_cache" in message and "FAIL" not in message


def test_a_short_tour_on_the_real_model_agrees_with_chapter_1(capsys: pytest.CaptureFixture[str]) -> None:
    status = tour.main(["--chapters", "ch04_kv_cache", "--tokens", "4", "--runs", "1", "--warmup", "0",
                        "--no-save"])
    out = capsys.readouterr().out
    assert status == 0 and "All 2 engine(s) produced ch01_baseline's tokens." in out
