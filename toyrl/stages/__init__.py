"""The stages of a training step, each a small frozen class registered by name, one module a kind.

A step (`toyrl.train.train_step`) runs, for every run of a chunk, reward -> selector -> advantage
(once per sampled batch) -> for each update of the schedule: normaliser -> objective (with the KL
term) -> gradient -> Adam. A variant (`toyrl.objective.Variant`) is one stage of each kind.

Each stage keeps its sampled form beside its exact-expected-update hook (`toyrl.expected`), as
micrograd keeps each backward beside its forward; a stage without an exact form says why in
`simulated_only`. Stages act on a group of runs at once (arrays with a leading runs axis); where
a stage has parameters, they are fields, so a new parametric stage needs no new `Variant` field.
Adding a mode is one registered class (docs/design.md shows how). Each kind's module opens with
its `Protocol`, the interface a training step calls, and declares its `Kind` record (`KIND`, by
kind, in step order: `KINDS`): spec key, default, Protocol, places in the orders, whether a
chunk's runs share one, the configuration fields its stages see (a `config` argument is that
`Settings` view, not the whole configuration), the methods toyrl calls and its exact hooks.
`register` holds a class to the Protocol for the type checker, and `toyrl.plugins` holds a
plugin's stage to its record when it loads.

| kind       | registered                                                                   |
| ---------- | ---------------------------------------------------------------------------- |
| reward     | `window`: 1 iff right approach, stopped, L >= min_length (the article's);     |
|            | `soft_overlong`: DAPO's 1 / -1 with its soft overlong punishment              |
|            | `length_penalty`: prime-rl's pass-rate-scaled linear length penalty;          |
|            | `gr3`: GR3's r / (1 + alpha abs(o) / group mean abs(o))                        |
| sampler    | `once` (the article's); `filter_groups` (DAPO's dynamic sampling); `gfpo`       |
|            | (GFPO: G' draws a prompt, the G shortest or most reward per token kept)        |
| selector   | `all`; `stopped` (truncated responses masked out of the loss: mask_truncated) |
|            | `difficulty`: groups of mean reward outside (low, high) out (ROLL's);         |
|            | `informative`: groups of equal rewards out (SkyRL's, prime-rl's)              |
| advantage  | `group_std` (ddof 0), `group_std_sample` (ddof 1), `batch_std`, `none`, `rloo`,        |
|            | `batch_whiten`, `token_whiten`(`_sample`), `reinforce_pp`, `opo`, `gpg`,        |
|            | `passk`, `max_rl`, `rloo_std`, `areal_whiten`(`_rewards`),                    |
|            | `areal_group_whiten`, `areal_batch_whiten`                                    |
| normaliser | the six aggregations, `length_power`, `prompt_mean`, `delta_l`: D_i and n of   |
|            | w_i = A_i / D_i                                                               |
| objective  | `ppo_clip`: min(rho A, clip(rho, 1 - epsilon, 1 + epsilon_high) A), dual_clip |
|            | `gspo`: the same with the sequence's ratio s_i (geometric mean of its tokens') |
|            | `cispo`: sg(clip(rho)) A log pi; `sapo`: a soft gate; `gpg`: A log pi          |
| kl         | `k3`: beta (pi_ref / pi - 1 - log(pi_ref / pi)), to the initial policy;       |
|            | `k1_reward`: beta k1 in each token's return (OpenRLHF's)                       |
| schedule   | `epochs`: num_iterations epochs of mini_batches updates on each sampled batch |

Advantages, with eps the std epsilon (the stage's `std_eps`, or the configuration's `std_eps`):

| advantage          | A_i                                                                   |
| ------------------ | --------------------------------------------------------------------- |
| `group_std`        | (r_i - group mean) / (group population std + eps)  (article, toy)      |
| `group_std_sample` | (r_i - group mean) / (group sample std + eps)  (TRL, verl, oat)        |
| `batch_std`        | (r_i - group mean) / (sample std of all the batch's rewards + eps)     |
| `none`             | r_i - group mean  (Dr. GRPO)                                          |
| `rloo`             | r_i - mean of the group's other G - 1 rewards  (RLOO)                 |
| `batch_whiten`     | a_i = r_i - group mean, then (a_i - mean(a)) / (sample std(a) + eps) over the batch |
| `token_whiten`(`_sample`), `reinforce_pp` | whitened over the batch's tokens (`TokenWhiten`)      |
| `opo`              | r_i - sum_j abs(o_j) r_j / sum_j abs(o_j) over the group  (OPO)                |
| `gpg`              | (N / M) (r_i - group mean), M the batch's nonzero rewards  (GPG)      |
| `max_rl`           | (r_i - group mean) / group mean, 0 if the mean is 0  (MaxRL)          |
| `rloo_std`         | (r_i - b_i) / (s_i + eps), b_i, s_i the mean and sample std of the    |
|                    | other G - 1 rewards; r_i - b_i where s_i = 0  (NeMo-RL)               |
| `areal_whiten`     | a_i = r_i - group mean (`_rewards`: r_i), then over the batch's       |
|                    | tokens (a_i - m) / (sample std + whiten_eps), m the token-weighted    |
|                    | mean  (AReaL's reward_norm, then adv_norm; `ArealWhiten`)             |
| `areal_group_whiten`, `areal_batch_whiten` | a_i = (r_i - group mean) / (group sample std, |
|                    | or the batch's about the group means, + eps), then whitened as        |
|                    | `areal_whiten`  (`ArealScaledWhiten`)                                 |

Aggregations (N = B G responses, |o_i| the token count of response i, L_norm a constant, by
default the cap):

| aggregation               | D_i                   | n | trainer name                              |
| ------------------------- | --------------------- | - | ----------------------------------------- |
| `seq_mean_token_mean`     | abs(o_i)              | N | GRPO; verl `seq-mean-token-mean`          |
| `token_mean`              | sum_j abs(o_j), batch | 1 | DAPO, BNPO; verl `token-mean`             |
| `seq_mean_token_sum`      | 1                     | N | verl `seq-mean-token-sum`                 |
| `seq_mean_token_sum_norm` | L_norm                | N | Dr. GRPO; TRL `dr_grpo`, oat `drgrpo`     |
| `token_sum_norm`          | L_norm                | 1 | verl `seq-mean-token-sum-norm` (sum / L)  |
| `token_sum`               | 1                     | 1 | plain sum                                 |
| `length_power`            | abs(o_i)^(1-a) L^a    | N | the family between the two (alpha = a)    |
| `prompt_mean`             | sum_j abs(o_j), group | B | SkyRL `prompt_mean`                       |
| `delta_l`                 | L abs(o_i)^a mean_j abs(o_j)^-a | N | Delta L Normalization (alpha = a) |
"""

from __future__ import annotations

from toyrl.stages.advantage import (
    Advantage,
    ArealScaledWhiten,
    ArealWhiten,
    BatchStd,
    BatchWhiten,
    BestOverSecond,
    Centred,
    GroupStd,
    LeaveOneOut,
    LeaveOneOutStd,
    LengthWeightedBaseline,
    MeanScaled,
    RescaledCentred,
    TokenWhiten,
    advantages_of,
    std_eps_of,
)
from toyrl.stages.kl import K3, KL, K1Reward, TokenAdvantage
from toyrl.stages.normaliser import (
    DeltaL,
    LengthPower,
    LongestResponse,
    Normaliser,
    PerResponse,
    PromptMean,
    TokenMean,
    weights,
)
from toyrl.stages.objective import (
    CISPO,
    GMPO,
    GSPO,
    SAPO,
    SEQUENCE_OBJECTIVES,
    VESPO,
    Objective,
    PlainPolicyGradient,
    PPOClip,
    Update,
)
from toyrl.stages.registry import (
    KIND,
    REGISTRY,
    Kind,
    Settings,
    check_declared,
    declarations,
    declared,
    parameters,
    register,
    simulated_only,
    stage_name,
)
from toyrl.stages.reward import (
    GroupRelativeRescaling,
    LengthPenalty,
    Reward,
    SoftOverlong,
    WindowReward,
    correct,
)
from toyrl.stages.sampler import FilterGroups, GroupFilter, OneDraw, Sampler, generated
from toyrl.stages.schedule import Epochs, Schedule
from toyrl.stages.selector import (
    AllResponses,
    GroupMeanWithin,
    RewardSpread,
    Selector,
    StoppedResponses,
    included_of,
)

KINDS = tuple(KIND)  # the kinds' names, in step order

__all__ = [
    "CISPO",
    "GMPO",
    "GSPO",
    "K3",
    "KIND",
    "KINDS",
    "KL",
    "REGISTRY",
    "SAPO",
    "SEQUENCE_OBJECTIVES",
    "VESPO",
    "Advantage",
    "AllResponses",
    "ArealScaledWhiten",
    "ArealWhiten",
    "BatchStd",
    "BatchWhiten",
    "BestOverSecond",
    "Centred",
    "DeltaL",
    "Epochs",
    "FilterGroups",
    "GroupFilter",
    "GroupMeanWithin",
    "GroupRelativeRescaling",
    "GroupStd",
    "K1Reward",
    "Kind",
    "LeaveOneOut",
    "LeaveOneOutStd",
    "LengthPenalty",
    "LengthPower",
    "LengthWeightedBaseline",
    "LongestResponse",
    "MeanScaled",
    "Normaliser",
    "Objective",
    "OneDraw",
    "PPOClip",
    "PerResponse",
    "PlainPolicyGradient",
    "PromptMean",
    "RescaledCentred",
    "Reward",
    "RewardSpread",
    "Sampler",
    "Schedule",
    "Selector",
    "Settings",
    "SoftOverlong",
    "StoppedResponses",
    "TokenAdvantage",
    "TokenMean",
    "TokenWhiten",
    "Update",
    "WindowReward",
    "advantages_of",
    "check_declared",
    "correct",
    "declarations",
    "declared",
    "generated",
    "included_of",
    "parameters",
    "register",
    "simulated_only",
    "stage_name",
    "std_eps_of",
    "weights",
]
