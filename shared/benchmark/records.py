"""What one measured request looks like, online or offline, and how a set of them is summarised.

The definitions follow `vllm bench serve`, so our numbers and vLLM's mean the same thing:

* TTFT: from sending the request (or calling the engine) to the first output token.
* ITL: the gaps between consecutive output tokens as the client saw them (one per streamed chunk
  after the first).
* TPOT: (end-to-end latency - TTFT) / (output tokens - 1), per request: the mean decode step.
* E2E: from sending the request to the last byte of the answer.

Output tokens are counted from what came back (token ids offline, the server's `usage` online),
never taken from what was asked for: a request that stops at EOS after 12 tokens counts 12.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from shared.stats import summarize


@dataclass
class RequestRecord:
    prompt_index: int
    input_tokens: int = 0
    output_tokens: int = 0
    e2e_ms: float = 0.0
    ttft_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    #: seconds from the start of the benchmark (or run) to sending this request
    start_s: float = 0.0
    run: int = 0
    error: str | None = None
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    #: what the engine or server itself reported (its own RequestMetrics), for comparison
    reported: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot_ms(self) -> float | None:
        if self.ttft_ms is None or self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / (self.e2e_ms / 1000) if self.e2e_ms > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tpot_ms"] = self.tpot_ms
        out["itl_ms"] = [round(x, 3) for x in self.itl_ms]
        return out


def summarize_records(records: list[RequestRecord]) -> dict[str, Any]:
    """Distributions over successful requests; ITL pools every gap of every request."""
    ok = [r for r in records if r.ok]
    return {
        "requests": len(records),
        "successful": len(ok),
        "failed": len(records) - len(ok),
        "input_tokens": sum(r.input_tokens for r in ok),
        "output_tokens": sum(r.output_tokens for r in ok),
        "output_tokens_per_request": summarize([r.output_tokens for r in ok]),
        "e2e_ms": summarize([r.e2e_ms for r in ok]),
        "ttft_ms": summarize([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        "tpot_ms": summarize([t for r in ok if (t := r.tpot_ms) is not None]),
        "itl_ms": summarize([x for r in ok for x in r.itl_ms]),
        "request_tokens_per_second": summarize([r.tokens_per_second for r in ok]),
    }
