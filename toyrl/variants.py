"""The named variants, in one registry: the article's four and what the trainers ship.

The article's four (section "The two biases") use the population std of its worked example. The
trainer presets were read from each trainer's loss and advantage code, as stored for the versions
named in `SOURCES` (names and defaults move between releases: check the version you run); the
trainers use torch's default, Bessel-corrected sample std, hence `group_std_sample`, with their
own epsilon. Any other combination is spelled as a spec (`toyrl.objective`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from toyrl.config import InvalidInput
from toyrl.objective import Variant, parse_spec, spec_keys
from toyrl.objective import from_spec as _from_spec
from toyrl.refusals import say

SOURCES = {
    "trl": "TRL 1.16.0, trl/trainer/grpo_trainer.py and grpo_config.py",
    "verl": "verl 0.9.1, verl/trainer/ppo/core_algos.py (compute_grpo_outcome_advantage, agg_loss)",
    "oat": "oat-llm 0.2.4, oat/algorithms/ppo.py (PPOLearner.learning_step, critic_type)",
    "openrlhf": "OpenRLHF 0.11.2, openrlhf/trainer/ppo_utils/experience_maker.py (advantage estimators), "
    "openrlhf/models/loss.py and openrlhf/utils/loss_utils.py (the loss and its token normalisation)",
    "families": "the newer length-aware objectives, each from its paper and the trainer code named in its "
    "preset (verl 0.9.1 verl/trainer/ppo/core_algos.py: compute_policy_loss_cispo, _sapo, _gpg, _geo_mean, "
    "compute_opo_outcome_advantage, compute_gpg_outcome_advantage, compute_reinforce_plus_plus(_baseline); "
    "TRL 1.16.0 grpo_trainer.py: loss_type 'cispo', 'sapo', 'luspo', 'vespo', "
    "importance_sampling_level='sequence')",
    "ms_swift": "ms-swift 4.6.0, swift/arguments/rlhf_args.py and swift/rlhf_trainers/grpo_trainer.py",
    "unsloth": "unsloth and unsloth_zoo 2026.10.9, unsloth/models/rl.py and unsloth_zoo/rl_replacements.py",
    "skyrl": "SkyRL (skyrl on the registry), skyrl/backends/skyrl_train/utils/ppo_utils.py",
    "areal": "AReaL 1.0.4, areal/api/cli_args.py and areal/trainer/ppo/actor.py",
    "nemo_rl": "NeMo-RL v0.7.0 (NVIDIA-NeMo/RL, not installable), nemo_rl/algorithms/grpo.py and loss/",
    "roll": "ROLL 8eb27cc2 (alibaba/ROLL, not installable), roll/utils/functionals.py",
    "slime": "slime v0.3.1 (THUDM/slime, not installable), slime/backends/megatron_utils/loss.py",
    "prime_rl": "prime-rl v0.8.0 (PrimeIntellect-ai/prime-rl, not installable), its orchestrator's advantage "
    "and trainer's loss",
    "easyr1": "EasyR1 0.3.3.dev0 (hiyouga/EasyR1 b44b311, not installable), verl/trainer/core_algos.py",
    "dapo": "the DAPO paper's recipe (Yu et al., 2025) as verl's DAPO recipe runs it: token-level mean, "
    "clip-higher, the soft overlong punishment (verl/workers/reward_manager/dapo.py), dynamic sampling "
    "(filter_groups)",
}


# verl's micro-batches in the presets of its V1 trainer's default divisor: the toy's batch in 8, of
# 16 responses each at its defaults (ppo_micro_batch_size_per_gpu = 16; `toyrl check` takes the
# setting's own size, and results/verl_width.md how the drift moves with it)
VERL_MICRO = "micro_batches=8,per_micro_batch=true"
VERL_MICRO_TEXT = "the batch in 8 micro-batches (ppo_micro_batch_size_per_gpu=16 at the toy's defaults)"


def _named(name: str, spec: str, summary: str = "", stands_for: str = "", label: str = "") -> Variant:
    return _from_spec(name, parse_spec(spec).spec(), summary=summary, stands_for=stands_for, label=label)


ARTICLE = ("grpo", "std_only", "length_only", "dr_grpo")

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        _named(
            "grpo",
            "advantage=group_std,aggregation=seq_mean_token_mean",
            "GRPO: std-scaled advantage, per-response mean",
            label="GRPO",
        ),
        _named(
            "std_only",
            "advantage=group_std,aggregation=seq_mean_token_sum_norm",
            "std division only, constant L_norm",
            label="GRPO without length division",
        ),
        _named(
            "length_only",
            "advantage=none,aggregation=seq_mean_token_mean",
            "length mean only: centred, per-response mean",
            label="GRPO without std division",
        ),
        _named(
            "dr_grpo",
            "advantage=none,aggregation=seq_mean_token_sum_norm",
            "Dr. GRPO: centred advantage, constant L_norm",
            label="Dr. GRPO",
        ),
        _named(
            "trl_default",
            "advantage=group_std_sample,aggregation=token_mean,std_eps=0.0001",
            "TRL's defaults",
            "TRL GRPOConfig() defaults: loss_type='dapo', scale_rewards='group', num_iterations=1, beta=0.0",
        ),
        _named(
            "trl_grpo",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,std_eps=0.0001",
            "TRL loss_type='grpo'",
            "TRL GRPOConfig(loss_type='grpo')",
        ),
        _named(
            "trl_dr_grpo_loss_only",
            "advantage=group_std_sample,aggregation=seq_mean_token_sum_norm,std_eps=0.0001",
            "half of Dr. GRPO: the loss, not the std",
            "TRL GRPOConfig(loss_type='dr_grpo') with scale_rewards left at 'group' "
            "(TRL's paper-reproduction recipe)",
        ),
        _named(
            "trl_dr_grpo",
            "advantage=none,aggregation=seq_mean_token_sum_norm",
            "full Dr. GRPO in TRL",
            "TRL GRPOConfig(loss_type='dr_grpo', scale_rewards='none')",
        ),
        _named(
            "trl_scale_none_only",
            "advantage=none,aggregation=token_mean",
            "half of Dr. GRPO: the std only",
            "TRL GRPOConfig(scale_rewards='none') with loss_type left at 'dapo'",
        ),
        _named(
            "trl_batch_scale",
            "advantage=batch_std,aggregation=token_mean,std_eps=0.0001",
            "TRL batch reward scaling",
            "TRL GRPOConfig(scale_rewards='batch')",
        ),
        _named(
            "verl_default",
            "advantage=group_std_sample,aggregation=token_mean,dual_clip=3.0,std_eps=1e-06",
            "verl's GRPO defaults",
            "verl algorithm.adv_estimator=grpo, norm_adv_by_std_in_grpo=True, loss_agg_mode='token-mean', "
            "the vanilla policy loss with its dual clip clip_ratio_c=3",
        ),
        _named(
            "verl_seq_mean_token_mean",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,std_eps=1e-06",
            stands_for="verl loss_agg_mode='seq-mean-token-mean' (the original GRPO aggregation)",
        ),
        _named(
            "verl_seq_mean_token_sum",
            "advantage=group_std_sample,aggregation=seq_mean_token_sum,std_eps=1e-06",
            stands_for="verl loss_agg_mode='seq-mean-token-sum'",
        ),
        _named(
            "verl_token_sum",
            "advantage=group_std_sample,aggregation=token_sum,dual_clip=3.0,std_eps=1e-06",
            "verl's token-sum: every token's loss summed, no normaliser",
            "verl 0.9.1 loss_agg_mode='token-sum' with adv_estimator='grpo' and the vanilla loss (dual clip "
            "clip_ratio_c=3)",
        ),
        _named(
            "verl_grpo_passk",
            "advantage=passk,aggregation=token_mean,dual_clip=3.0,std_eps=1e-06",
            "verl's pass@k advantage: the best response's margin over the second, token mean",
            "verl 0.9.1 adv_estimator='grpo_passk' (norm_adv_by_std_in_grpo=True) with its default "
            "loss_agg_mode='token-mean' and the vanilla loss (dual clip clip_ratio_c=3)",
        ),
        _named(
            "verl_sum_norm_only",
            f"advantage=group_std_sample,aggregation=seq_mean_token_sum_longest,{VERL_MICRO},std_eps=1e-06",
            "verl's sum-norm, the std kept",
            "verl 0.9.1 loss_agg_mode='seq-mean-token-sum-norm' with norm_adv_by_std_in_grpo left at True "
            f"and loss_scale_factor unset, {VERL_MICRO_TEXT}",
        ),
        _named(
            "verl_dr_grpo",
            f"advantage=none,aggregation=seq_mean_token_sum_longest,{VERL_MICRO}",
            "verl's Dr. GRPO settings",
            "verl 0.9.1 loss_agg_mode='seq-mean-token-sum-norm', norm_adv_by_std_in_grpo=False, "
            f"loss_scale_factor unset, {VERL_MICRO_TEXT}",
        ),
        _named(
            "verl_dr_grpo_constant",
            "advantage=none,aggregation=seq_mean_token_sum_norm",
            "full Dr. GRPO in verl",
            "verl 0.9.1 loss_agg_mode='seq-mean-token-sum-norm', norm_adv_by_std_in_grpo=False, "
            "loss_scale_factor = L_norm (or trainer.use_v1=False, whose padded width is the cap)",
        ),
        _named(
            "oat_grpo",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,std_eps=1e-08",
            stands_for="oat 0.2.4 critic_type='grpo' with --beta 0",
        ),
        _named(
            "oat_drgrpo",
            "advantage=none,aggregation=seq_mean_token_sum_norm",
            "oat's Dr. GRPO",
            "oat 0.2.4 critic_type='drgrpo' (the paper authors' implementation; its default) with "
            "--beta 0 (oat's default beta is 0.1, a k3 term in the loss)",
        ),
        _named(
            "openrlhf_group_norm",
            "advantage=group_std_sample,aggregation=token_mean,std_eps=1e-09",
            stands_for="OpenRLHF 0.11.2 advantage estimator 'group_norm' with its default "
            "loss_agg_mode='token-mean' (the optimiser step's tokens, since 0.10.4)",
        ),
        _named(
            "openrlhf_dr_grpo",
            "advantage=none,aggregation=token_mean",
            "Dr. GRPO's advantage, a token-mean loss",
            "OpenRLHF 0.11.2 advantage estimator 'dr_grpo' with its default loss_agg_mode='token-mean'",
        ),
        _named(
            "openrlhf_rloo",
            "advantage=rloo,aggregation=token_mean",
            stands_for="OpenRLHF 0.11.2 advantage estimator 'rloo' with its default "
            "loss_agg_mode='token-mean'",
        ),
        _named(
            "openrlhf_reinforce_baseline",
            "advantage=token_whiten,aggregation=token_mean",
            stands_for="OpenRLHF 0.11.2 advantage estimator 'reinforce_baseline' (group mean, then whitened "
            "over the rollout's tokens) with its default loss_agg_mode='token-mean'",
        ),
        # The trainers added since (SOURCES by prefix): each one's defaults and its setting nearest
        # Dr. GRPO's loss, under its own name even where the spec is another preset's (`toyrl check`
        # names the trainer's own first).
        _named(
            "ms_swift_grpo",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,beta=0.04,std_eps=0.0001",
            "ms-swift's GRPO defaults: per-response mean, group std, k3 0.04",
            "ms-swift 4.6.0 swift rlhf --rlhf_type grpo: loss_type grpo, scale_rewards group, beta 0.04",
        ),
        _named(
            "ms_swift_dr_grpo",
            "advantage=none,aggregation=seq_mean_token_sum_norm,beta=0.04",
            "ms-swift's Dr. GRPO settings, k3 0.04",
            "ms-swift 4.6.0 --loss_type dr_grpo --scale_rewards none, beta left at 0.04 (dr_grpo at beta 0)",
        ),
        _named(
            "unsloth_default",
            "advantage=group_std_sample,aggregation=token_mean,std_eps=0.0001",
            "Unsloth's defaults: TRL's token mean and group std",
            "Unsloth 2026.10.9 GRPOConfig(): loss_type None read as dapo, beta None as 0",
        ),
        _named(
            "unsloth_dr_grpo",
            "advantage=none,aggregation=seq_mean_token_sum_norm",
            "Unsloth's Dr. GRPO: loss_type='dr_grpo' alone",
            "Unsloth 2026.10.9 GRPOConfig(loss_type='dr_grpo'), which turns scale_rewards to False itself",
        ),
        _named(
            "slime_default",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,std_eps=1e-06",
            "slime's defaults: per-sample mean, group std",
            "slime v0.3.1 --advantage-estimator grpo without --calculate-per-token-loss",
        ),
        _named(
            "slime_no_std",
            "advantage=none,aggregation=seq_mean_token_mean",
            "slime's Dr. GRPO flag: the std off, the per-sample mean kept",
            "slime v0.3.1 --disable-grpo-std-normalization (its help cites Dr. GRPO); no flag divides by a "
            "constant",
        ),
        _named(
            "roll_grpo",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,std_eps=1e-06",
            "ROLL's GRPO: per-response mean, group std",
            "ROLL (8eb27cc2) adv_estimator grpo with loss_agg_mode seq-mean-token-mean, its default",
        ),
        _named(
            "roll_dr_grpo",
            "advantage=none,aggregation=seq_mean_token_sum_norm",
            "ROLL's Dr. GRPO: group mean, sum over the padded width",
            "ROLL (8eb27cc2) adv_estimator reinforce, norm_mean_type group, loss_agg_mode "
            "seq-mean-token-sum-norm at a fixed width (a constant multiple of Dr. GRPO's loss)",
        ),
        _named(
            "roll_rlvr",
            "advantage=reinforce_pp,aggregation=seq_mean_token_mean,dual_clip=1.4,selector=difficulty,low=0.1,"
            "high=0.95,drop_truncated=True",
            "ROLL's RLVR examples: whitened rewards, groups out by their mean reward",
            "ROLL (8eb27cc2) examples/*-rlvr*/rlvr_config.yaml: adv_estimator reinforce, whiten_advantages, "
            "difficulty_mask (0.1, 0.95) with max_len_mask, dual clip 1 + 2 pg_clip",
        ),
        _named(
            "skyrl_default",
            "advantage=group_std_sample,aggregation=token_mean,std_eps=1e-06",
            "SkyRL's GRPO: the mini-batch's token mean, group std, no dual clip",
            "SkyRL 0.3.0 trainer.algorithm defaults: grpo, loss_reduction token_mean (its k3 KL left out)",
        ),
        _named(
            "skyrl_dr_grpo",
            "advantage=none,aggregation=seq_mean_token_sum_norm",
            "SkyRL's Dr. GRPO example",
            "SkyRL 0.3.0 grpo_norm_by_std false, loss_reduction seq_mean_token_sum_norm with max_seq_len "
            "(examples/train/algorithms/drgrpo/run_drgrpo_gsm8k.sh)",
        ),
        _named(
            "areal_grpo",
            "advantage=areal_group_whiten,aggregation=token_mean,epsilon=0.4,std_eps=1e-06",
            "AReaL's GSM8K GRPO: group mean and std, then whitened over the batch's tokens",
            "AReaL 1.0.4 examples/math/gsm8k_grpo.yaml: reward_norm group, adv_norm batch/batch, clip 0.4",
        ),
        _named(
            "areal_dr_grpo",
            "advantage=areal_whiten,aggregation=token_mean,epsilon=0.4,whiten_eps=1e-06",
            "AReaL's GSM8K Dr. GRPO: group mean, then whitened over the batch's tokens",
            "AReaL 1.0.4 examples/math/gsm8k_drgrpo.yaml: reward_norm group mean, adv_norm batch/batch kept "
            "(no setting divides by a constant)",
        ),
        _named(
            "areal_liteppo",
            "advantage=areal_batch_whiten,aggregation=token_mean,epsilon=0.4,std_eps=1e-06",
            "AReaL's GSM8K LitePPO: group mean, the batch's std, then token whitening",
            "AReaL 1.0.4 examples/math/gsm8k_liteppo.yaml: reward_norm group mean and batch std, adv_norm",
        ),
        _named(
            "areal_reinforce",
            "advantage=areal_whiten_rewards,aggregation=token_mean,epsilon=0.4,whiten_eps=1e-06",
            "AReaL's GSM8K REINFORCE: the rewards whitened over the batch's tokens",
            "AReaL 1.0.4 examples/math/gsm8k_reinforce.yaml: no reward_norm, adv_norm batch/batch",
        ),
        _named(
            "nemo_rl_default",
            "advantage=rloo_std,aggregation=token_mean,beta=0.01,std_eps=1e-06",
            "NeMo-RL's GRPO: leave-one-out mean and std, the global token mean, k3 0.01",
            "NeMo-RL v0.7.0 grpo_math_1B.yaml: use_leave_one_out_baseline and normalize_rewards, "
            "token_level_loss, reference_policy_kl_penalty 0.01",
        ),
        _named(
            "nemo_rl_no_std",
            "advantage=none,aggregation=token_mean,beta=0.01",
            "NeMo-RL without the std: r - group mean, the global token mean, k3 0.01",
            "NeMo-RL v0.7.0 normalize_rewards and use_leave_one_out_baseline false: its nearest to Dr. GRPO "
            "(no setting divides by a constant)",
        ),
        _named(
            "prime_rl_default",
            "advantage=none,aggregation=token_mean,selector=informative",
            "prime-rl's defaults: r - group mean, the token mean of groups with a signal",
            "prime-rl v0.8.0 algo.type grpo with its default zero-advantage filter (groups all right or all "
            "wrong leave the step)",
        ),
        _named(
            "easyr1_default",
            "advantage=group_std_sample,aggregation=token_mean,dual_clip=3.0,epsilon_high=0.3,std_eps=1e-06",
            "EasyR1's GRPO: token mean, group std, clip 0.2/0.3, dual clip 3",
            "EasyR1 0.3.3.dev0 adv_estimator grpo (always / std), loss_avg_mode token, without its KL",
        ),
        # Older releases whose code does otherwise at its defaults (`toyrl check --version` maps the
        # rest; the conformance suite runs those releases: scripts/conformance.sh TRAINER@VERSION).
        _named(
            "trl_default@0.22.1",
            "advantage=none,aggregation=token_mean",
            "TRL 0.22.0-0.22.1's defaults: no std",
            "TRL 0.22.1 GRPOConfig() defaults: scale_rewards='group', which that release's "
            "_generate_and_score_completions swaps for no std (fixed in 0.22.2), with loss_type='dapo'",
        ),
        _named(
            "openrlhf_group_norm@0.10.3",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,std_eps=1e-09",
            "OpenRLHF 0.10.3's group_norm: a per-response mean at its defaults",
            "OpenRLHF 0.10.3 estimator 'group_norm' with its defaults: the token mean of each micro-batch of "
            "train.micro_batch_size=1 sample (openrlhf/utils/loss_utils.py get_loss_batch_info), so each "
            "response's own mean, averaged",
        ),
        _named(
            "openrlhf_dr_grpo@0.10.3",
            "advantage=none,aggregation=seq_mean_token_mean",
            "OpenRLHF 0.10.3's dr_grpo: a per-response mean at its defaults",
            "OpenRLHF 0.10.3 estimator 'dr_grpo' with its defaults (one sample a micro-batch, each "
            "response's own token mean): length_only's spec",
        ),
        _named(
            "openrlhf_rloo@0.6.4",
            "advantage=token_whiten,aggregation=seq_mean_token_mean",
            "OpenRLHF 0.6.4's rloo: whitened over tokens, per-response mean",
            "OpenRLHF 0.6.4 --advantage_estimator rloo: its replay buffer whitens the advantages over the "
            "tokens (NaiveReplayBuffer.normalize, float32), and PolicyLoss averages each response's token "
            "mean",
        ),
        _named(
            "dapo",
            "advantage=group_std_sample,aggregation=token_mean,epsilon_high=0.28,std_eps=1e-06,"
            "reward=soft_overlong,sampler=filter_groups",
            "DAPO: token-level mean, clip-higher, soft overlong punishment, dynamic sampling",
            "the DAPO recipe (its best run: reward 1 / -1 with the overlong buffer a fifth of the longest "
            "response, groups with equal accuracy dropped and refilled, no overlong filtering); one "
            "optimiser step per batch, so clip-higher does not act (spell mini_batches or num_iterations)",
        ),
        _named(
            "dapo_overlong_filtering",
            "advantage=group_std_sample,aggregation=token_mean,epsilon_high=0.28,mask_truncated=True,std_eps=1e-06",
            "DAPO's overlong filtering ablation: token mean, clip-higher, truncated responses masked",
            "the DAPO paper's overlong filtering (truncated responses out of the loss), which its "
            "best-performing run does not use; the 0/1 reward, no dynamic sampling",
        ),
        # The newer families (SOURCES["families"]). The objectives that differ from PPO's only off
        # policy (gspo, cispo, sapo) take four mini-batches per batch, as GSPO's paper does: at one
        # update per batch they are the on-policy update, the same numbers as their advantage and
        # aggregation with PPO's clip.
        _named(
            "gspo",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,objective=gspo,mini_batches=4,"
            "std_eps=1e-06",
            "GSPO: the sequence's ratio, clipped at 3e-4 / 4e-4, four mini-batches",
            "GSPO (Zheng et al. 2025, eq. 5-7; TRL importance_sampling_level='sequence', verl "
            "policy_loss.loss_mode='gspo' with loss_agg_mode='seq-mean-token-mean'): each batch in four "
            "mini-batches, as the paper trains",
        ),
        _named(
            "cispo",
            "advantage=group_std_sample,aggregation=token_mean,objective=cispo,mini_batches=4,std_eps=1e-06",
            "CISPO: a detached importance weight capped at 5, token mean, four mini-batches",
            "CISPO (MiniMax-M1, Chen et al. 2025, eq. 4-5: the token-level mean; verl "
            "policy_loss.loss_mode='cispo' with clip_ratio_low=1.0, clip_ratio_high=4.0; TRL "
            "loss_type='cispo' with epsilon_high=5.0, ScaleRL's cap, is this loss with TRL's std "
            "epsilon 1e-4 and schedule, as toyrl check maps it)",
        ),
        _named(
            "sapo",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,objective=sapo,mini_batches=4,"
            "std_eps=1e-06",
            "SAPO: a soft gate (tau 1 / 1.05) for the clip, per-response mean, four mini-batches",
            "SAPO (Gao et al. 2025; verl policy_loss.loss_mode='sapo' at tau_pos=1.0, tau_neg=1.05, which "
            "aggregates seq-mean-token-mean; TRL loss_type='sapo' is this loss with TRL's std epsilon "
            "1e-4 and schedule, as toyrl check maps it)",
        ),
        _named(
            "gmpo",
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,objective=gmpo,mini_batches=4,"
            "std_eps=1e-06",
            "GMPO: the geometric mean of the token ratios, clipped at e^-0.4 / e^0.4, four mini-batches",
            "GMPO (Zhao et al. 2025, arXiv 2507.20673; verl 0.9.1 policy_loss.loss_mode='geo_mean' with "
            "clip_ratio_low = clip_ratio_high = 0.4, averaged over the responses whatever loss_agg_mode "
            "says, one micro-batch a mini-batch): each batch in four mini-batches",
        ),
        _named(
            "luspo",
            "advantage=group_std_sample,aggregation=seq_mean_token_sum,objective=gspo,mini_batches=4,"
            "shuffle=once,std_eps=0.0001",
            "LUSPO: GSPO's sequence ratio, each response's token sum, four mini-batches",
            "TRL 1.16.0 GRPOConfig(loss_type='luspo', importance_sampling_level='sequence', epsilon=3e-4, "
            "epsilon_high=4e-4, steps_per_generation=4) (LUSPO, arXiv 2602.05261: GSPO with each sequence's "
            "loss scaled by its length)",
        ),
        _named(
            "vespo",
            "advantage=group_std_sample,aggregation=token_mean,objective=vespo,batch_tokens=True,"
            "mini_batches=4,shuffle=once,std_eps=0.0001",
            "VESPO: a Gamma-shaped soft weight of the sequence ratio, token mean, four mini-batches",
            "TRL 1.16.0 GRPOConfig(loss_type='vespo', steps_per_generation=4) at its defaults vespo_k_pos=2, "
            "vespo_lambda_pos=3, vespo_k_neg=3, vespo_lambda_neg=2 (VESPO, arXiv 2602.10693), normalised as "
            "dapo",
        ),
        _named(
            "opo",
            "advantage=opo,aggregation=token_mean,dual_clip=3.0",
            "OPO: a length-weighted group baseline, on-policy",
            "OPO (Hao et al. 2025, eq. 7: b = sum |o| r / sum |o|, one update per batch; verl "
            "adv_estimator='opo' with its default loss_agg_mode='token-mean' and vanilla loss, dual clip "
            "clip_ratio_c=3, which cannot act on-policy)",
        ),
        _named(
            "gpg",
            "advantage=gpg,aggregation=token_mean,objective=gpg",
            "GPG: centred advantage scaled by N / (nonzero rewards), no ratio or clip",
            "GPG (Chu et al. 2025; verl adv_estimator='gpg' and policy_loss.loss_mode='gpg', "
            "loss_agg_mode='token-mean')",
        ),
        _named(
            "reinforce_pp",
            "advantage=reinforce_pp,aggregation=token_mean,dual_clip=3.0",
            "REINFORCE++: rewards whitened over the batch's tokens, no group mean",
            "REINFORCE++ (Hu 2025; verl adv_estimator='reinforce_plus_plus' at gamma 1, "
            "loss_agg_mode='token-mean', the vanilla loss's dual clip clip_ratio_c=3), without its KL term",
        ),
        _named(
            "reinforce_pp_baseline",
            "advantage=token_whiten_sample,aggregation=token_mean,dual_clip=3.0",
            "REINFORCE++-baseline: group mean, then whitened over the batch's tokens",
            "verl adv_estimator='reinforce_plus_plus_baseline' (masked_whiten, Bessel-corrected), "
            "loss_agg_mode='token-mean', the vanilla loss's dual clip clip_ratio_c=3",
        ),
        _named(
            "dapo_overlong",
            "advantage=group_std_sample,aggregation=token_mean,reward=soft_overlong,std_eps=1e-06",
            "DAPO's soft overlong punishment alone, token mean",
            "DAPO (Yu et al. 2025, eq. 13) reward 1 / -1 with its overlong buffer (verl "
            "reward_manager='dapo', overlong_buffer.len a fifth of the cap, penalty_factor 1)",
        ),
        _named(
            "dynamic_sampling",
            "advantage=group_std_sample,aggregation=token_mean,sampler=filter_groups,std_eps=1e-06",
            "DAPO's dynamic sampling alone, token mean",
            "DAPO (Yu et al. 2025, section 3.2) groups all right or all wrong dropped and refilled (verl's "
            "DAPO recipe: algorithm.filter_groups.enable=True, metric 'acc', max_num_gen_batches 10; verl "
            "0.9.x's V1 trainer has no cap)",
        ),
        _named(
            "gfpo",
            "advantage=group_std_sample,aggregation=token_mean,sampler=gfpo,std_eps=1e-06",
            "GFPO: 16 draws a prompt, the 8 shortest kept, token mean",
            "GFPO (Shrivastava et al. 2025, section 3: sample G' = 16, keep k = 8 by length, advantages "
            "over the kept, DAPO's token-level mean)",
        ),
        _named(
            "gfpo_token_efficiency",
            "advantage=group_std_sample,aggregation=token_mean,sampler=gfpo,keep=reward_per_token,"
            "std_eps=1e-06",
            "GFPO by reward per token: 16 draws, the 8 most efficient kept",
            "GFPO's token-efficiency metric (Shrivastava et al. 2025: reward / length), G' = 16, k = 8",
        ),
        # The objectives proposed in 2025-2026 (issue 42): docs/variants.md cites each formula's source.
        _named(
            "skyrl_prompt_mean",
            "advantage=group_std_sample,aggregation=prompt_mean,std_eps=1e-06",
            "SkyRL's prompt mean: the token mean within each group, then the mean over prompts",
            "SkyRL skyrl-v0.3.0 loss_reduction='prompt_mean' with its default advantage_estimator='grpo'",
        ),
        _named(
            "delta_l_norm",
            "advantage=group_std_sample,aggregation=delta_l,dual_clip=3.0,std_eps=1e-06",
            "ΔL Normalization: token weights |o|^-1 / sum |o|^-1 over the batch",
            "ΔL Normalization (arXiv 2509.07558) at alpha = 1, as the authors' verl fork runs it "
            "(docs/variants.md)",
        ),
        _named(
            "max_rl",
            "advantage=max_rl,aggregation=token_mean",
            "MaxRL: (r - group mean) / group mean, token mean",
            "prime-rl v0.8.0 algo.type='max_rl' (MaxRL, arXiv 2602.02710), its loss over the step's tokens "
            "(without prime-rl's default zero-advantage filter, selector=informative)",
        ),
        _named(
            "prime_rl_length_penalty",
            "advantage=none,aggregation=token_mean,reward=length_penalty",
            "prime-rl's linear length penalty: pass-rate-scaled, before the group mean",
            "prime-rl v0.8.0 algo.type='grpo' with the linear length_penalty at its defaults, its loss over "
            "the step's tokens (without its default zero-advantage filter, selector=informative)",
        ),
        _named(
            "gr3",
            "advantage=group_std,aggregation=seq_mean_token_mean,reward=gr3",
            "GR3: the reward rescaled by 1 / (1 + 0.3 |o| / group mean |o|), in the article's GRPO",
            "GR3 (arXiv 2603.10535) at alpha = 0.3 inside GRPO (docs/variants.md: what is not modelled)",
        ),
        _named(
            "trl_async_grpo",
            "advantage=group_std,aggregation=token_mean,std_eps=1e-08",
            "TRL's AsyncGRPO: population std, token sum over the global token count",
            "TRL 1.16.0 trl/experimental/async_grpo at its defaults, one micro-batch a step",
        ),
    )
}


def article_variants() -> list[Variant]:
    """The article's four variants, in its order."""
    return [VARIANTS[name] for name in ARTICLE]


def display_name(name: str) -> str:
    """The name a person reads for the variant a table or a figure calls `name`: a named variant's
    label ("GRPO without std division" for length_only), else `name` as it is (a preset's name, a
    spec); commands take `name`, and `toyrl variants` lists both."""
    variant = VARIANTS.get(name)
    return variant.title if variant is not None else name


# A label (`label=NAME` in a spec, or `NAME=SPEC`): the name a variant is shown and stored under.
LABEL_MAX = 40
LABEL_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
LABEL_FORM = f"1 to {LABEL_MAX} letters, digits, '_', '.' or '-', starting with a letter"
# what a label is refused with, declared once: the page says it from its data (`toyrl.explore`)
LABEL_MESSAGES = {
    "form": "label {label!r} must be {form}",
    "taken": "label {label!r} is already a named variant's name or display text ('toyrl variants'); "
    "choose another",
    "spec_key": "label {label!r} is a spec key; choose another",
    "labels": "variant {text!r} is given {count} labels ({labels}); give one",
    "no_variant": "label {label!r} names no variant: add a name or a spec",
    "named_twice": "two variants are named {name!r}: {first} and {second}; give each its own label",
}


def check_label(label: str) -> str:
    """`label` if it can name a variant: of LABEL_FORM (no `=` or `,`: not a spec), and neither a
    named variant's name or display text, `all` nor a spec key (`NAME=PRESET` would read as a
    spec); InvalidInput if not."""
    if not (0 < len(label) <= LABEL_MAX and label[0].isalpha() and set(label) <= LABEL_CHARACTERS):
        raise InvalidInput(say(LABEL_MESSAGES["form"], label=label, form=LABEL_FORM))
    if label in VARIANTS or label == "all" or label in {variant.title for variant in VARIANTS.values()}:
        raise InvalidInput(say(LABEL_MESSAGES["taken"], label=label))
    if label in (*spec_keys(), "label", "eps"):
        raise InvalidInput(say(LABEL_MESSAGES["spec_key"], label=label))
    return label


def _split_label(text: str) -> tuple[str | None, str]:
    """(label, the variant without it) of `text`: a spec with a `label=NAME` pair, or `NAME=SPEC`
    or `NAME=PRESET` (NAME not a spec key; SPEC's first pair has its own `=`); (None, text) if it
    has no label."""
    parts = text.split(",")
    labels = [part.partition("=")[2].strip() for part in parts if part.partition("=")[0].strip() == "label"]
    if labels:
        text = ",".join(part for part in parts if part.partition("=")[0].strip() != "label")
    key, sign, rest = text.partition("=")
    if sign and key.strip() not in (*spec_keys(), "label", "eps"):
        if "=" in rest.split(",")[0] or rest.strip() in VARIANTS:
            labels.append(key.strip())
            text = rest
    if len(labels) > 1:
        raise InvalidInput(
            say(LABEL_MESSAGES["labels"], text=text, count=len(labels), labels=", ".join(labels))
        )
    if labels and not text.strip():
        raise InvalidInput(say(LABEL_MESSAGES["no_variant"], label=labels[0]))
    return (labels[0], text.strip()) if labels else (None, text)


def parse_variant(text: str) -> Variant:
    """A named variant, or one spelled as a spec `key=value,...` (see `toyrl.objective`); either
    labelled, `label=NAME` among the spec's pairs or `NAME=SPEC` (`NAME=PRESET` for a named one).
    A labelled variant is named by its label (`check_label`): the results' variant column, tables
    and legends show it; a preset keeps its summary, but not its display text."""
    label, text = _split_label(text)
    if label is not None:
        return dataclasses.replace(_unlabelled(text), name=check_label(label), label="")
    return _unlabelled(text)


def _unlabelled(text: str) -> Variant:
    if text in VARIANTS:
        return VARIANTS[text]
    if "=" not in text:
        close = difflib.get_close_matches(text, list(VARIANTS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInput(
            f"unknown variant {text!r}{hint}; valid: {', '.join(ARTICLE)}, all, a trainer preset "
            f"('toyrl variants' lists them), or a spec key=value,... over {', '.join(spec_keys())}"
        )
    return parse_spec(text)


def saved_variant(name: str, recorded: Any = None) -> Variant:
    """The variant a results table names `name`, keeping that name: built from its spec in
    `recorded` (a sidecar's "variants": a labelled variant's name is not a spec) when that has
    one, else read from the name (a table written by toyrl 0.2 names a spelled variant by the text
    it was given, not by its canonical spec, and a replay of its runs must produce rows under the
    same name)."""
    entry = recorded.get(name) if isinstance(recorded, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("spec"), dict):
        summary, stands_for = str(entry.get("summary", "")), str(entry.get("stands_for", ""))
        return _from_spec(name, entry["spec"], summary=summary, stands_for=stands_for)
    variant = parse_variant(name)
    return variant if variant.name == name else dataclasses.replace(variant, name=name)


def distinct(variants: Iterable[Variant]) -> list[Variant]:
    """`variants` without repeats (one name given twice with one spec is one variant); InvalidInput
    naming both specs when two variants of different specs share a name (a label)."""
    chosen: dict[str, Variant] = {}
    for variant in variants:
        known = chosen.get(variant.name)
        if known is not None and known.spec() != variant.spec():
            raise InvalidInput(
                say(
                    LABEL_MESSAGES["named_twice"],
                    name=variant.name,
                    first=known.spec_text(),
                    second=variant.spec_text(),
                )
            )
        chosen[variant.name] = variant
    return list(chosen.values())


def parse_variants(names: Sequence[str]) -> list[Variant]:
    """Variants by name or spec (labelled or not), without repeats; 'all' stands for the article's
    four; InvalidInput when two of different specs would share a name (`distinct`)."""
    return distinct(
        variant
        for text in names
        for variant in (article_variants() if text == "all" else [parse_variant(text)])
    )
