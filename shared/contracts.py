"""The contracts between the parts of an engine: what a request asks for (`SamplingParams`), what
was measured while serving it (`RequestMetrics`), and what comes back (`GenerateResult`,
`TokenEvent`).

`SamplingParams` validates itself when constructed, so a bad value cannot exist and no later stage
has to defend against one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

FinishReason = Literal["stop", "length", "abort"]

_SEED_MIN = -(2**63)
_SEED_MAX = 2**64 - 1


def _is_int(value: Any) -> bool:
    # bool is a subclass of int in Python; a token count of `True` is a bug, not a 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token and when to stop, with vLLM's names and meanings.

    temperature 0 means greedy; top_k -1 means no top-k filter; top_p 1.0 means no nucleus filter.
    """

    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 0
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if not _is_number(self.temperature) or not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be a finite number, got {self.temperature!r}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature!r}")
        if not _is_int(self.top_k) or not (self.top_k == -1 or self.top_k >= 1):
            raise ValueError(f"top_k must be -1 (disabled) or an integer >= 1, got {self.top_k!r}")
        if not _is_number(self.top_p) or not math.isfinite(self.top_p):
            raise ValueError(f"top_p must be a finite number, got {self.top_p!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(
                f"min_tokens must be an integer in [0, max_tokens={self.max_tokens}], "
                f"got {self.min_tokens!r}"
            )
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a boolean, got {self.ignore_eos!r}")
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not isinstance(stop, (tuple, list)) or not all(isinstance(s, str) for s in stop):
            raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}")
        if any(s == "" for s in stop):
            raise ValueError("stop strings must be non-empty")
        object.__setattr__(self, "stop", tuple(stop))
        if self.seed is not None and (
            not _is_int(self.seed) or not _SEED_MIN <= self.seed <= _SEED_MAX
        ):
            raise ValueError(f"seed must be a 64-bit integer or None, got {self.seed!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


@dataclass
class RequestMetrics:
    """What was measured while serving one request. 0.0 means "not measured by this engine" and is
    left out of `as_dict()`, so a chapter that cannot see inside `generate()` does not report a
    made-up time to first token."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_ms: float = 0.0
    tokens_per_second: float = 0.0
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    # Chapter 2: positions run through the model (without a KV cache, far more than tokens made).
    positions_processed: int = 0
    # Chapter 2: the total partitioned into model forward, token selection and everything else.
    forward_ms: float = 0.0
    selection_ms: float = 0.0
    other_ms: float = 0.0
    # Chapter 4: bytes of KV cache this request holds.
    kv_cache_bytes: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                out.update({k: v for k, v in value.items() if v})
            elif value:
                out[f.name] = round(value, 3) if isinstance(value, float) else value
        return out


@dataclass(frozen=True)
class TokenEvent:
    """One step of a request's stream: the token made, the text it completed (possibly empty,
    when the token ends mid-character or may be the start of a stop string), and on the last event
    the finish reason and metrics."""

    token_id: int | None
    text: str
    finish_reason: FinishReason | None = None
    metrics: RequestMetrics | None = None


@dataclass
class GenerateResult:
    text: str
    output_ids: list[int]
    finish_reason: FinishReason
    metrics: RequestMetrics
    provenance: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["metrics"] = self.metrics.as_dict()
        return out
