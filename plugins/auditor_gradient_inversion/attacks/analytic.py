"""Closed-form gradient leakage: FC layers with bias, linear patch stems, and labels.

* Fully connected layer with bias (seed 004 supplement Eq. 5; seed 003 Appendix A): for one sample
  and ``z = W x + b``, ``∂L/∂W_i = (∂L/∂z_i) xᵀ`` and ``∂L/∂b_i = ∂L/∂z_i``, so
  ``x = ∂L/∂W_i / ∂L/∂b_i`` for any row with a non-zero bias gradient (the row with the largest
  |∂L/∂b_i| is used, for numerical stability).
* Linear patch embedding + learnable positional embedding (seed 003 rule R1, APRIL-style,
  Appendix B): ``∂L/∂W_pe = Δᵀ X`` with ``Δ = ∂L/∂E_pos`` over the patch tokens, so the patches
  are the least-squares solution ``X = (Δᵀ)⁺ ∂L/∂W_pe``, exact when rank(Δ) = N (D ≥ N). A
  leading CLS row of the positional embedding (N + 1 rows) is dropped; it has no patch.
* Labels (iDLG, Zhao et al. 2020; seed 004 §3.3): for batch 1 the true class is the only row of
  the last FC layer with a negative gradient sum. For batches, a count heuristic in the spirit of
  LLG (Wainakh et al.): with at least B negative row sums the B most negative classes (exact
  for distinct labels, GradInversion's restoration); with fewer, every negative class once and
  the remaining samples to the classes whose share ``−s_c / m`` (``m = −Σ_{s<0} s / B``, the mean
  per-sample impact) most exceeds their count. An estimate for repeated labels.
"""

from __future__ import annotations

import torch


def fc_input(grad_w: torch.Tensor, grad_b: torch.Tensor) -> torch.Tensor:
    """Return the input of a biased linear layer from its weight and bias gradients (batch 1)."""
    i = int(grad_b.abs().argmax())
    return grad_w[i] / grad_b[i]


def patch_embedding_inputs(
    grad_w: torch.Tensor, grad_pos: torch.Tensor, patch: int, grid: tuple[int, int]
) -> torch.Tensor:
    """Return the (C, H, W) input a linear patch stem saw, from its weight and pos-emb gradients.

    Args:
        grad_w: gradient of the patch-embedding conv weight, (D, C, p, p).
        grad_pos: gradient of the positional embedding, (1, N, D) or (1, N + 1, D) with CLS.
        patch: the patch size p (kernel == stride).
        grid: number of patches along (H, W).
    """
    d, c = grad_w.shape[0], grad_w.shape[1]
    n = grid[0] * grid[1]
    delta = grad_pos.reshape(-1, d)[-n:].double()  # (N, D): patch tokens only
    patches = torch.linalg.lstsq(delta.T, grad_w.reshape(d, -1).double()).solution  # (N, C p p)
    img = patches.reshape(grid[0], grid[1], c, patch, patch).permute(2, 0, 3, 1, 4)
    return img.reshape(c, grid[0] * patch, grid[1] * patch).to(grad_w.dtype)


def recover_labels(grad_w: torch.Tensor, batch: int) -> torch.Tensor:
    """Return ``batch`` labels inferred from the last FC layer's weight gradient (classes, features)."""
    sums = grad_w.sum(dim=1)
    if batch == 1:
        return sums.argmin().view(1)
    neg = (sums < 0).nonzero().flatten()
    if neg.numel() >= batch:
        return neg[sums[neg].argsort()[:batch]].sort().values
    if neg.numel() == 0:
        return sums.argsort()[:batch].sort().values
    share = -sums[neg] / (-sums[neg].sum() / batch)  # estimated samples per negative class
    counts = torch.ones_like(neg)
    for _ in range(batch - neg.numel()):
        counts[int((share - counts).argmax())] += 1
    return torch.repeat_interleave(neg, counts).sort().values
