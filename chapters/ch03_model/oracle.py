"""Checking the hand-written model against the Hugging Face one (the oracle): logits on the same
input, and greedy continuations for several prompts at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from chapters.ch03_model.model import Llama, NoCacheAttention


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Prompts of different lengths -> token ids and positions, both [B, W] with W the longest.
    Shorter prompts are padded on the left, so every row's last token is in the last column; a
    padding slot holds `pad_id` (any token: nothing sees it) at position -1 (invisible to attention)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    positions = torch.full((len(prompts), width), -1, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        positions[row, width - len(prompt) :] = torch.arange(len(prompt))
    return ids.to(device), positions.to(device)


@torch.inference_mode()
def greedy_tokens(
    model: Llama, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int
) -> list[list[int]]:
    """Greedy continuations of every prompt, all rows in one batch, with no cache: each step runs
    the whole (padded) sequence again and takes the argmax of each row's last position."""
    rows = [list(p) for p in prompts]
    for _ in range(max_new_tokens):
        ids, positions = left_pad(rows, pad_id, next(model.parameters()).device)
        logits = model(ids, positions, NoCacheAttention())[:, -1]
        for row, token in zip(rows, logits.argmax(-1).tolist()):  # argmax: ties go to the lower id
            row.append(token)
    return [row[len(p) :] for row, p in zip(rows, prompts)]


@dataclass
class LogitComparison:
    tokens: int
    max_abs_diff: float  # over every position and every vocabulary entry
    max_abs_logit: float  # the reference's largest |logit|, for scale
    argmax_agree: float  # fraction of positions whose top token is the same
    top_tokens: list[int]  # our top token after each position (teacher-forced greedy choices)

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 7) for k, v in vars(self).items() if k != "top_tokens"}


@torch.inference_mode()
def compare_logits(
    model: Llama, hf_model: nn.Module, prompts: Sequence[Sequence[int]], pad_id: int
) -> list[LogitComparison]:
    """Our logits for all prompts in one left-padded batch, against the reference's one by one."""
    device = next(model.parameters()).device
    ids, positions = left_pad(prompts, pad_id, device)
    ours_batch = model(ids, positions, NoCacheAttention()).float()
    out = []
    for row, prompt in enumerate(prompts):
        ours = ours_batch[row, ids.shape[1] - len(prompt) :]
        ref = hf_model(torch.tensor([list(prompt)], device=device)).logits[0].float()
        out.append(
            LogitComparison(
                tokens=len(prompt),
                max_abs_diff=(ours - ref).abs().max().item(),
                max_abs_logit=ref.abs().max().item(),
                argmax_agree=(ours.argmax(-1) == ref.argmax(-1)).float().mean().item(),
                top_tokens=ours.argmax(-1).tolist(),
            )
        )
    return out
