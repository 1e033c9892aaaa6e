"""The exercise's token-level loss API for real LLM tensors, in PyTorch (optional: the extra `torch`).

Exercise (`Dr. GRPO Length and Difficulty Bias Corrections`), sections 2-3. Shapes: N = B G
responses, prompt-major (the G responses of a prompt are adjacent), L token positions; `logp`,
`old_logp`, `ref_logp` and `mask` are [N, L], `advantages` [N], `rewards` [B G].
Conventions, as the exercise states them:

- ratio rho = exp(logp - old_logp); the clipped objective min(rho A, clip(rho, 1 - c, 1 + c) A);
  the k3 KL estimate exp(ref - logp) - (ref - logp) - 1, subtracted as beta k3.
- Gradients flow to `logp` only: old and reference scores and advantages are frozen (detached).
- Padding isolation: masked positions are zeroed before the objective, so no value there (even
  inf or NaN) reaches a valid token's loss or gradient.
- Diagnostics (`kl_mean`, `clipfrac`, `ratio_mean`) are detached scalars averaged over valid
  tokens, all zero when no token is valid.

`drgrpo_loss` divides the masked objective sum by N max_len, max_len the caller's fixed
generation limit (article, "The Dr. GRPO objective"); `grpo_reference_loss` averages within each
response, then over responses. How these map onto TRL, verl and oat settings: docs/trainers.md.
"""

from __future__ import annotations

from toyrl import install

try:
    import torch
    from torch import Tensor
except ImportError as error:  # the rest of toyrl needs no torch
    raise ImportError(f"toyrl.losses needs PyTorch: {install.hint('torch')}") from error


def _check_matrix(name: str, tensor: Tensor, shape: torch.Size | None = None) -> None:
    if not isinstance(tensor, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() != 2:
        raise ValueError(f"{name} must have shape [N, L], got {tuple(tensor.shape)}")
    if shape is not None and tensor.shape != shape:
        raise ValueError(f"{name} must have shape {tuple(shape)} like logp, got {tuple(tensor.shape)}")


def _check_scores(logp: Tensor, old_logp: Tensor, ref_logp: Tensor, mask: Tensor | None = None) -> None:
    _check_matrix("logp", logp)
    if not logp.is_floating_point():
        raise ValueError(f"logp must be a floating tensor, got {logp.dtype}")
    _check_matrix("old_logp", old_logp, logp.shape)
    _check_matrix("ref_logp", ref_logp, logp.shape)
    if mask is not None:
        _check_matrix("mask", mask, logp.shape)


def _check_advantages(advantages: Tensor, responses: int) -> None:
    if not isinstance(advantages, Tensor) or advantages.shape != (responses,):
        shape = tuple(advantages.shape) if isinstance(advantages, Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must have shape [N] = ({responses},), got {shape}")


def _check_clip(clip_eps: float, beta: float) -> None:
    if not 0 <= clip_eps < 1:
        raise ValueError(f"clip_eps must be in [0, 1), got {clip_eps}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """rewards [B G] as [B, G]; ValueError naming the argument if it cannot be."""
    if not isinstance(rewards, Tensor) or rewards.dim() != 1:
        shape = tuple(rewards.shape) if isinstance(rewards, Tensor) else type(rewards).__name__
        raise ValueError(f"rewards must be a 1-D tensor [B * G], got {shape}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size must be an integer >= 2, got {group_size!r}")
    if rewards.numel() == 0 or rewards.numel() % group_size:
        raise ValueError(
            f"group_size must divide the number of rewards ({rewards.numel()}), got {group_size}"
        )
    return rewards.view(-1, group_size)


def token_objective(
    logp: Tensor, old_logp: Tensor, ref_logp: Tensor, advantages: Tensor, clip_eps: float, beta: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(objective, ratio, kl), each [N, L]: min(rho A, clip(rho) A) - beta k3, unmasked, unreduced.

    Only `logp` carries gradient; old and reference scores and advantages are detached.
    """
    _check_scores(logp, old_logp, ref_logp)
    _check_advantages(advantages, logp.shape[0])
    _check_clip(clip_eps, beta)
    old_logp, ref_logp = old_logp.detach(), ref_logp.detach()
    advantage = advantages.detach().to(logp.dtype)[:, None]
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
    log_ref_ratio = ref_logp - logp
    kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1
    objective = torch.minimum(ratio * advantage, clipped * advantage) - beta * kl
    return objective, ratio, kl


def masked_logprobs(
    logp: Tensor, old_logp: Tensor, ref_logp: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The three score tensors with zeros at masked positions; shape, dtype, device and the
    gradient paths of valid positions kept (`torch.where`, so masked values never leak)."""
    _check_scores(logp, old_logp, ref_logp, mask)
    valid = mask.bool()

    def zeroed(scores: Tensor) -> Tensor:
        return torch.where(valid, scores, torch.zeros_like(scores))

    return zeroed(logp), zeroed(old_logp), zeroed(ref_logp)


def token_statistics(ratio: Tensor, kl: Tensor, mask: Tensor, clip_eps: float) -> dict[str, Tensor]:
    """`kl_mean`, `clipfrac` (share of tokens with |rho - 1| > clip_eps) and `ratio_mean`:
    detached floating scalars of shape (), averaged over valid tokens; all zero if none is valid."""
    _check_matrix("ratio", ratio)
    _check_matrix("kl", kl, ratio.shape)
    _check_matrix("mask", mask, ratio.shape)
    valid = mask.bool()
    count = valid.sum()
    zero = torch.zeros((), dtype=ratio.dtype, device=ratio.device)

    def mean(values: Tensor) -> Tensor:
        total = torch.where(valid, values.detach().to(ratio.dtype), zero).sum()
        return torch.where(count > 0, total / count.clamp(min=1), zero)

    return {
        "kl_mean": mean(kl),
        "clipfrac": mean((ratio.detach() - 1).abs() > clip_eps),
        "ratio_mean": mean(ratio),
    }


def grpo_reference_advantages(rewards: Tensor, group_size: int, std_eps: float = 1e-6) -> Tensor:
    """GRPO's advantages [B G]: group mean removed, divided by the group's sample std plus std_eps.

    The sample std (Bessel-corrected, torch's default, as TRL, verl and oat use) is sqrt(G/(G-1))
    times the population std of the article's worked example and of the toy simulator.
    """
    grouped = _grouped(rewards, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, keepdim=True) + std_eps)).reshape(-1)


def drgrpo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """Dr. GRPO's advantages [B G]: group-centred rewards, no std; order, dtype and device kept."""
    grouped = _grouped(rewards, group_size)
    return (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)


def _objective_and_stats(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float,
    beta: float,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """The masked objective [N, L] (zero at padding), the valid-token mask, and the diagnostics."""
    _check_scores(logp, old_logp, ref_logp, mask)
    logp, old_logp, ref_logp = masked_logprobs(logp, old_logp, ref_logp, mask)
    objective, ratio, kl = token_objective(logp, old_logp, ref_logp, advantages, clip_eps, beta)
    valid = mask.bool()
    masked = torch.where(valid, objective, torch.zeros_like(objective))
    return masked, valid, token_statistics(ratio, kl, mask, clip_eps)


def drgrpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    max_len: int,
    clip_eps: float = 0.2,
    beta: float = 0.04,
) -> tuple[Tensor, dict[str, Tensor]]:
    """(loss, stats): minus the masked objective sum divided by N max_len.

    max_len is the caller's fixed generation limit, never the batch's longest response: a constant
    denominator is what removes the length bias. Per valid token of response i the gradient on
    logp is -A_i rho / (N max_len) where unclipped (beta = 0), 0 where clipped.
    """
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer (the generation limit), got {max_len!r}")
    objective, _, stats = _objective_and_stats(logp, old_logp, ref_logp, advantages, mask, clip_eps, beta)
    return -objective.sum() / (logp.shape[0] * max_len), stats


def grpo_reference_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    beta: float = 0.04,
) -> tuple[Tensor, dict[str, Tensor]]:
    """(loss, stats): GRPO's aggregation, the mean over valid tokens within each response, then the
    mean over responses (a response with no valid token contributes 0). Per valid token of
    response i the gradient on logp is -A_i rho / (N |o_i|) where unclipped (beta = 0)."""
    objective, valid, stats = _objective_and_stats(logp, old_logp, ref_logp, advantages, mask, clip_eps, beta)
    lengths = valid.sum(dim=1).clamp(min=1).to(objective.dtype)
    return -(objective.sum(dim=1) / lengths).mean(), stats
