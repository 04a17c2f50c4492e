"""Online softmax: the max and the normaliser in one pass, rescaling the sum whenever the max grows.

    python chapters/ch08_flash_attention/01_online_softmax.py
"""

from __future__ import annotations

import math

import torch

from chapters.ch08_flash_attention.attention import online_softmax, online_softmax_stats


def main() -> None:
    xs = [1.0, 3.0, 2.0, 7.0, 0.5]
    print("step   x    running max m    running sum l = sum exp(x_i - m)")
    m, l = float("-inf"), 0.0
    for x in xs:  # the loop inside online_softmax_stats, printed
        m_new = max(m, x)
        l = l * math.exp(m - m_new) + math.exp(x - m_new)
        m = m_new
        print(f"      {x:4.1f}   {m:6.1f}           {l:.6f}")
    exact = sum(math.exp(x - max(xs)) for x in xs)
    print(f"two-pass answer: max {max(xs)}, sum {exact:.6f}; one pass gave {online_softmax_stats(xs)}")

    big = torch.tensor([1000.0, 999.0, 998.0])
    unsafe = torch.exp(big) / torch.exp(big).sum()  # exp(1000) overflows to inf; inf / inf = nan
    print(f"\nwhy subtract the max: exp(x) / sum exp(x) = {unsafe.tolist()}, "
          f"exp(x - m) / l = {online_softmax(big, block=2).tolist()}")
    x = torch.randn(4, 1000, dtype=torch.float64) * 5
    for block in (1, 64, 1000):
        err = (online_softmax(x, block) - x.softmax(-1)).abs().max().item()
        print(f"online_softmax in blocks of {block:4d}: max |difference| from torch.softmax = {err:.1e}")


if __name__ == "__main__":
    main()
