"""What the trainers ship, as toyrl variants: each preset is one combination of `toyrl.objective`.

Read from each trainer's loss and advantage code, as stored for the versions named in `SOURCES`
(names and defaults move between releases: check the version you run). The article's four variants
use the population std of the article's worked example; the trainers use torch's default,
Bessel-corrected sample std, hence `group_std_sample`, with their own epsilon.
"""

from __future__ import annotations

from toyrl.objective import ARTICLE_VARIANTS, Variant

SOURCES = {
    "trl": "huggingface/trl, trl/trainer/grpo_trainer.py and grpo_config.py (main branch, 2025)",
    "verl": "volcengine/verl, verl/trainer/ppo/core_algos.py (compute_grpo_outcome_advantage, agg_loss)",
    "oat": "sail-sg/oat and sail-sg/understand-r1-zero, the PPO learner's critic_type handling",
    "openrlhf": "OpenRLHF/OpenRLHF, openrlhf/trainer/ppo_utils/experience_maker.py (advantage estimators)",
    "dapo": "the DAPO paper's recipe (Yu et al., 2025): token-level mean, clip-higher, overlong filtering",
}

# name -> (variant, the trainer setting it stands for)
PRESETS: dict[str, tuple[Variant, str]] = {
    v.name: (v, setting)
    for v, setting in (
        (
            Variant("trl_default", "group_std_sample", "token_mean", eps=1e-4, summary="TRL's defaults"),
            "TRL GRPOConfig() defaults: loss_type='dapo', scale_rewards='group', num_iterations=1, beta=0.0",
        ),
        (
            Variant(
                "trl_grpo",
                "group_std_sample",
                "seq_mean_token_mean",
                eps=1e-4,
                summary="TRL loss_type='grpo'",
            ),
            "TRL GRPOConfig(loss_type='grpo')",
        ),
        (
            Variant(
                "trl_dr_grpo_loss_only",
                "group_std_sample",
                "seq_mean_token_sum_norm",
                eps=1e-4,
                summary="half of Dr. GRPO: the loss, not the std",
            ),
            "TRL GRPOConfig(loss_type='dr_grpo') with scale_rewards left at 'group' "
            "(TRL's paper-reproduction recipe)",
        ),
        (
            Variant(
                "trl_dr_grpo", "none", "seq_mean_token_sum_norm", eps=1e-4, summary="full Dr. GRPO in TRL"
            ),
            "TRL GRPOConfig(loss_type='dr_grpo', scale_rewards='none')",
        ),
        (
            Variant(
                "trl_scale_none_only",
                "none",
                "token_mean",
                eps=1e-4,
                summary="half of Dr. GRPO: the std only",
            ),
            "TRL GRPOConfig(scale_rewards='none') with loss_type left at 'dapo'",
        ),
        (
            Variant(
                "trl_batch_scale", "batch_std", "token_mean", eps=1e-4, summary="TRL batch reward scaling"
            ),
            "TRL GRPOConfig(scale_rewards='batch')",
        ),
        (
            Variant(
                "verl_default", "group_std_sample", "token_mean", eps=1e-6, summary="verl's GRPO defaults"
            ),
            "verl algorithm.adv_estimator=grpo, norm_adv_by_std_in_grpo=True, loss_agg_mode='token-mean'",
        ),
        (
            Variant("verl_seq_mean_token_mean", "group_std_sample", "seq_mean_token_mean", eps=1e-6),
            "verl loss_agg_mode='seq-mean-token-mean' (the original GRPO aggregation)",
        ),
        (
            Variant("verl_seq_mean_token_sum", "group_std_sample", "seq_mean_token_sum", eps=1e-6),
            "verl loss_agg_mode='seq-mean-token-sum'",
        ),
        (
            Variant(
                "verl_sum_norm_only", "group_std_sample", "token_sum_norm", eps=1e-6, summary="one out of two"
            ),
            "verl loss_agg_mode='seq-mean-token-sum-norm' with norm_adv_by_std_in_grpo left at True",
        ),
        (
            Variant("verl_dr_grpo", "none", "token_sum_norm", eps=1e-6, summary="full Dr. GRPO in verl"),
            "verl loss_agg_mode='seq-mean-token-sum-norm', norm_adv_by_std_in_grpo=False",
        ),
        (
            Variant("oat_grpo", "group_std_sample", "seq_mean_token_mean", eps=1e-8),
            "oat critic_type='grpo'",
        ),
        (
            Variant("oat_drgrpo", "none", "seq_mean_token_sum_norm", summary="oat's Dr. GRPO"),
            "oat critic_type='drgrpo' (the paper authors' implementation)",
        ),
        (
            Variant("openrlhf_group_norm", "group_std_sample", "seq_mean_token_mean", eps=1e-9),
            "OpenRLHF advantage_estimator='group_norm'",
        ),
        (
            Variant("openrlhf_dr_grpo", "none", "seq_mean_token_mean", summary="changes only the advantage"),
            "OpenRLHF advantage_estimator='dr_grpo' "
            "(the advantage only; the loss keeps its per-response mean)",
        ),
        (
            Variant("openrlhf_rloo", "rloo", "seq_mean_token_mean"),
            "OpenRLHF advantage_estimator='rloo'",
        ),
        (
            Variant("openrlhf_reinforce_baseline", "batch_whiten", "seq_mean_token_mean", eps=1e-8),
            "OpenRLHF advantage_estimator='reinforce_baseline' (group mean, then batch whitening)",
        ),
        (
            Variant(
                "dapo",
                "group_std_sample",
                "token_mean",
                epsilon=0.2,
                epsilon_high=0.28,
                mask_truncated=True,
                eps=1e-6,
                summary="DAPO: token-level mean, clip-higher, truncated responses masked",
            ),
            "DAPO recipe (clip-higher needs num_iterations > 1 to act; spell num_iterations=2 to see it)",
        ),
    )
}

ALL_VARIANTS: dict[str, Variant] = ARTICLE_VARIANTS | {
    name: variant for name, (variant, _) in PRESETS.items()
}


def stands_for(name: str) -> str:
    """The trainer setting a named variant stands for ('' for the article's own four)."""
    return PRESETS[name][1] if name in PRESETS else ""
