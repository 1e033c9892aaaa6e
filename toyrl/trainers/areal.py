"""AReaL's PPO actor settings on the toy (areal 1.0.4, tag v1.0.4 of inclusionAI/AReaL:
areal/api/cli_args.py, `PPOActorConfig` and `NormConfig`; areal/trainer/ppo/actor.py,
`PPOActor._compute_advantages`, `_ppo_update` and `grpo_loss_fn`; areal/utils/data.py,
`Normalization`; areal/utils/functional/functional.py, `ppo_actor_loss_fn` and `sapo_loss_fn`;
areal/engine/fsdp_engine.py, the loss weight of each micro-batch). Settings are the YAML's dotted
paths, e.g. `actor.adv_norm.std_level`.

What the mapping follows:
- the reward: clip((r + `actor.reward_bias`) x `actor.reward_scaling`, +-`actor.reward_clip`), then
  `actor.reward_norm` (absent by default): `mean_level` group (its `group_size` responses; with
  `mean_leave1out` the mean of the others) or batch, `std_level` group or batch (the sample std
  where `std_unbiased`, the default), x_centred / (std + `eps`, 1e-5 by default);
- each token's advantage is its response's reward (GAE at discount 1, lambda 1, no values), then
  `actor.adv_norm` (absent by default): at batch levels, whitened over the batch's *tokens* (the
  mean and the Bessel-corrected std over every token of the loss mask), / (std + eps): the toy's
  AReaL stages (toyrl/stages/advantage.py): areal_whiten after the group mean (or the
  leave-one-out mean, G / (G - 1) times it), areal_group_whiten after the group mean and std,
  areal_batch_whiten after the group mean and the batch's std about it (the LitePPO example),
  areal_whiten_rewards without reward_norm; each epsilon divided by the reward scale where no std
  divides before it;
- the loss: each micro-batch's token sum over the loss mask, weighed by its share of the
  mini-batch's tokens (loss_weight_fn = loss_mask.count_nonzero): the token mean over the
  mini-batch; `actor.ppo_n_minibatches` mini-batches (4 by default) of a batch of
  `train_dataset.batch_size` prompts x `gconfig.n_samples` responses, one pass;
- PPO's clip at `actor.eps_clip` (and `eps_clip_higher` above), the dual clip `actor.c_clip`
  (None: none); `actor.importance_sampling_level` sequence: GSPO's ratio; `actor.use_sapo_loss`:
  SAPO's gates (`sapo_tau_pos` / `sapo_tau_neg`);
- `gconfig.n_samples`: the group size G.
"""

from __future__ import annotations

from typing import Any

from toyrl.config import InvalidInput
from toyrl.trainers import (
    Entry,
    Levers,
    Release,
    Setting,
    ToyMapping,
    Trainer,
    grad_clip_note,
    not_modelled,
    ppo_spec,
    schedule_spec,
)
from toyrl.trainers.launch import Launch, read_overrides
from toyrl.trainers.shell import Word
from toyrl.trainers.verl import ratio_clip

ACTOR = "actor."
UNSET = "(unset)"  # a NormConfig section the configuration does not give: AReaL's None
LEVELS = ("batch", "group", UNSET)
KL_ESTIMATORS = ("k1", "k2", "k3")


def _norm(section: str) -> dict[str, Setting]:
    """The settings of a NormConfig section (`actor.reward_norm.`, `actor.adv_norm.`); a level
    given as null is None (no centring, no scaling), one not given is UNSET; the section itself
    given as null (`actor.adv_norm=null`) is off whatever its keys say."""
    return {
        section[:-1]: Setting(UNSET, (UNSET,), optional=True),  # null: the section off
        section + "mean_level": Setting(UNSET, LEVELS, optional=True),
        section + "std_level": Setting(UNSET, LEVELS, optional=True),
        section + "mean_leave1out": Setting(False, kind=bool),
        section + "std_unbiased": Setting(True, kind=bool),
        section + "eps": Setting(1e-5, kind=float, low=0.0),
        section + "group_size": Setting(1, kind=int, low=1),
    }


SETTINGS_1_0_4 = {
    ACTOR + "ppo_n_minibatches": Setting(4, kind=int, low=1),
    ACTOR + "eps_clip": Setting(0.2, kind=float, low=0.0),
    ACTOR + "eps_clip_higher": Setting(None, kind=float, low=0.0, optional=True),
    ACTOR + "c_clip": Setting(None, kind=float, low=1.0, optional=True),
    ACTOR + "reward_scaling": Setting(1.0, kind=float),
    ACTOR + "reward_bias": Setting(0.0, kind=float),
    ACTOR + "reward_clip": Setting(20.0, kind=float, low=0.0),
    **_norm(ACTOR + "reward_norm."),
    **_norm(ACTOR + "adv_norm."),
    ACTOR + "overlong_reward_penalty": Setting(False, kind=bool),
    ACTOR + "mask_no_eos_with_zero": Setting(False, kind=bool),
    ACTOR + "discount": Setting(1.0, kind=float, low=0.0, high=1.0),
    ACTOR + "gae_lambda": Setting(1.0, kind=float, low=0.0, high=1.0),
    ACTOR + "kl_ctl": Setting(0.1, kind=float, low=0.0),
    ACTOR + "kl_estimator": Setting("k1", KL_ESTIMATORS),
    ACTOR + "use_sapo_loss": Setting(False, kind=bool),
    ACTOR + "sapo_tau_pos": Setting(1.0, kind=float, low=0.0, high=1000.0),
    ACTOR + "sapo_tau_neg": Setting(1.05, kind=float, low=0.0, high=1000.0),
    ACTOR + "importance_sampling_level": Setting("token", ("token", "sequence")),
    ACTOR + "m2_threshold": Setting(None, kind=float, optional=True),
    ACTOR + "optimizer.gradient_clipping": Setting(1.0, kind=float, low=0.0),
    "gconfig.n_samples": Setting(1, kind=int, low=1, high=10_000),
    "train_dataset.batch_size": Setting(1, kind=int, low=1),
}


def _levels(s: dict[str, Any], section: str) -> tuple[Any, Any] | None:
    """(mean_level, std_level) of a NormConfig section, NormConfig's defaults ('batch') where a
    given section leaves one out; None when the section is not given or is null (AReaL's None)."""
    mean, std = s[section + "mean_level"], s[section + "std_level"]
    if s[section[:-1]] is None or (mean == UNSET and std == UNSET):
        return None
    return ("batch" if mean == UNSET else mean), ("batch" if std == UNSET else std)


def _check_group_size(s: dict[str, Any]) -> None:
    section = ACTOR + "reward_norm."
    if s[section + "group_size"] != s["gconfig.n_samples"]:
        raise InvalidInput(
            f"{section}group_size={s[section + 'group_size']} is not gconfig.n_samples="
            f"{s['gconfig.n_samples']}: AReaL's groups would not be the prompts' responses; set it to "
            "gconfig.n_samples (its examples write ${gconfig.n_samples})"
        )


def _reward_advantage(s: dict[str, Any], notes: list[str]) -> str | None:
    """The advantage stage of reward_norm (None: the scaled reward itself, no baseline)."""
    section = ACTOR + "reward_norm."
    levels = _levels(s, section)
    if levels is None:
        return None
    mean, std = levels
    scale = s[ACTOR + "reward_scaling"]
    if mean == "group":
        _check_group_size(s)
        if s[section + "mean_leave1out"] and std is None:
            return "rloo"
        if not s[section + "mean_leave1out"] and std is None:
            return "none"
        if not s[section + "mean_leave1out"] and std == "group":
            eps = s[section + "eps"] / scale
            if _levels(s, ACTOR + "adv_norm.") is None:
                notes.append(
                    f"reward_norm divides the scaled rewards' group std + {s[section + 'eps']:g}: the "
                    f"rewards' std + {eps:g} (eps / reward_scaling)"
                )
            return f"{'group_std_sample' if s[section + 'std_unbiased'] else 'group_std'},std_eps={eps:.6g}"
    why = "the toy's advantages centre on the group's mean"
    if mean == "group" and std == "batch":
        why = "the std of the group-centred rewards over the batch; the toy's batch_std is the rewards' own"
    elif mean == "group":
        why = "a leave-one-out mean divided by a std"
    raise not_modelled(
        section + "mean_level, std_level",
        f"{mean}{' with mean_leave1out' if s[section + 'mean_leave1out'] else ''}, {std}",
        ["group, None", "group, group", "group with mean_leave1out, None"],
        why,
    )


def _advantage(s: dict[str, Any], notes: list[str]) -> str:
    """The advantage stage: reward_norm's, then adv_norm's token-weighted whitening."""
    scale, bias, clip = s[ACTOR + "reward_scaling"], s[ACTOR + "reward_bias"], s[ACTOR + "reward_clip"]
    if scale <= 0:
        raise not_modelled(ACTOR + "reward_scaling", scale, ["a positive number"], "it reverses the rewards")
    if max(abs(bias), abs(1 + bias)) * scale > clip:
        raise not_modelled(
            ACTOR + "reward_clip",
            clip,
            [f"{max(abs(bias), abs(1 + bias)) * scale:g} or more"],
            "it clips the toy's scaled rewards",
        )
    section = ACTOR + "adv_norm."
    levels = _levels(s, section)
    if levels is None:
        by_reward = _reward_advantage(s, notes)
        if by_reward is None:
            raise not_modelled(
                ACTOR + "reward_norm",
                None,
                ["a group mean"],
                "without reward_norm or adv_norm each token's advantage is its scaled reward: no baseline",
            )
        if scale != 1 and not by_reward.startswith("group_std"):
            notes.append(
                f"reward_scaling={scale:g} multiplies the advantages by {scale:g}: a scale of the learning "
                "rate, which the toy leaves out"
            )
        return by_reward
    if levels != ("batch", "batch"):
        raise not_modelled(
            section + "mean_level, std_level",
            f"{levels[0]}, {levels[1]}",
            ["batch, batch"],
            "the toy's AReaL whitening is over the batch's tokens",
        )
    if not s[section + "std_unbiased"]:
        raise not_modelled(
            section + "std_unbiased", False, [True], "a population std over the batch's tokens"
        )
    return _whitened(s, notes)


def _whitened(s: dict[str, Any], notes: list[str]) -> str:
    """The advantage stage of reward_norm followed by adv_norm at batch levels (toyrl's AReaL
    stages, toyrl/stages/advantage.py `ArealWhiten`, `ArealScaledWhiten`): whitening is blind to
    the rewards' scale but for its epsilon, so a scale k before it divides adv_norm's eps by k."""
    scale = s[ACTOR + "reward_scaling"]
    eps = s[ACTOR + "adv_norm.eps"]
    section = ACTOR + "reward_norm."
    levels = _levels(s, section)
    if levels is None:
        return _with_whiten_eps("areal_whiten_rewards", eps / scale)
    mean, std = levels
    leave1out = s[section + "mean_leave1out"]
    if mean == "group":
        _check_group_size(s)
    if mean == "group" and std is None:
        if not leave1out:
            return _with_whiten_eps("areal_whiten", eps / scale)
        group = s["gconfig.n_samples"]
        notes.append(
            f"mean_leave1out: r_i less the others' mean is {group}/{group - 1} (r_i - group mean), a scale "
            f"adv_norm's whitening removes but for its epsilon: whiten_eps = eps x {group - 1}/{group} / "
            "reward_scaling"
        )
        return _with_whiten_eps("areal_whiten", eps * (group - 1) / group / scale)
    if mean == "group" and std in ("group", "batch") and not leave1out and s[section + "std_unbiased"]:
        name = "areal_group_whiten" if std == "group" else "areal_batch_whiten"
        return f"{name},std_eps={s[section + 'eps'] / scale:.12g},whiten_eps={eps:.12g}"
    raise not_modelled(
        section + "mean_level, std_level",
        f"{mean}{' with mean_leave1out' if leave1out else ''}, {std}"
        f"{'' if s[section + 'std_unbiased'] or std is None else ' (std_unbiased False)'}",
        ["group, None", "group, group", "group, batch", "group with mean_leave1out, None"],
        "before adv_norm's whitening, toyrl models a group mean and a sample std of the group or batch",
    )


def _with_whiten_eps(name: str, whiten_eps: float) -> str:
    if whiten_eps >= 1:
        raise not_modelled(
            ACTOR + "adv_norm.eps", whiten_eps, ["below reward_scaling"], "an epsilon of 1 or more"
        )
    return f"{name},whiten_eps={whiten_eps:.12g}"


def _objective(s: dict[str, Any], notes: list[str]) -> list[str]:
    if s[ACTOR + "use_sapo_loss"]:
        spec = ["objective=sapo"]
        for key, toy_default in (("tau_pos", 1.0), ("tau_neg", 1.05)):
            if s[ACTOR + "sapo_" + key] != toy_default:
                spec.append(f"{key}={s[ACTOR + 'sapo_' + key]}")
        return spec
    if s[ACTOR + "eps_clip"] == 0:
        raise not_modelled(ACTOR + "eps_clip", 0.0, ["a number above 0"], "a clip range of 0")
    high_name = ACTOR + ("eps_clip_higher" if s[ACTOR + "eps_clip_higher"] is not None else "eps_clip")
    low, high = ratio_clip(ACTOR + "eps_clip", s[ACTOR + "eps_clip"], high_name, s[high_name], notes)
    epsilon = 1.0 if low is None else low
    if s[ACTOR + "importance_sampling_level"] == "sequence":
        return ["objective=gspo", f"epsilon={epsilon}", f"epsilon_high={high}"]
    c_clip = s[ACTOR + "c_clip"]
    if c_clip is not None and c_clip <= 1:
        raise InvalidInput(f"{ACTOR}c_clip={c_clip:g}: AReaL asserts c_clip > 1; valid: above 1, or None")
    return ppo_spec(epsilon, high, dual_clip=c_clip)


def _mapping(s: dict[str, Any]) -> ToyMapping:
    notes: list[str] = []
    unmodelled: list[str] = []
    if s[ACTOR + "discount"] != 1 or s[ACTOR + "gae_lambda"] != 1:
        raise not_modelled(
            ACTOR + "discount, gae_lambda",
            f"{s[ACTOR + 'discount']}, {s[ACTOR + 'gae_lambda']}",
            ["1.0, 1.0"],
            "discounted per-token returns",
        )
    spec = [f"advantage={_advantage(s, notes)}", "aggregation=token_mean"]
    spec += _objective(s, notes)
    group = s["gconfig.n_samples"]
    batch = s["train_dataset.batch_size"] * group
    minibatches = s[ACTOR + "ppo_n_minibatches"]
    schedule, notes_of_schedule = schedule_spec(
        batch, max(1, batch // minibatches), "none", "ppo_n_minibatches"
    )
    spec += schedule
    unmodelled += notes_of_schedule
    if minibatches > 1:
        unmodelled.append(
            f"ppo_n_minibatches={minibatches}: AReaL deals the responses to its mini-batches balanced by "
            "their token counts (allocate_balanced_mbs_synced), not in the batch's order as the toy cuts them"
        )
    if s[ACTOR + "kl_ctl"] > 0:
        unmodelled.append(
            f"kl_ctl={s[ACTOR + 'kl_ctl']:g}: a {s[ACTOR + 'kl_estimator']} penalty in each token's reward, "
            "to the ref model's log-probs (log-prob 0 where no ref model is configured); left out"
        )
    if s[ACTOR + "overlong_reward_penalty"]:
        unmodelled.append(
            "overlong_reward_penalty=True: DAPO's soft overlong penalty on the raw reward (overlong_tokens, "
            "overlong_penalty_factor), before reward_bias and reward_scaling; left out"
        )
    if s[ACTOR + "mask_no_eos_with_zero"] and s[ACTOR + "reward_bias"] != 0:
        unmodelled.append(
            "mask_no_eos_with_zero=True: a truncated response's reward is 0, not its biased and scaled "
            "reward; left out (the toy's truncated responses are wrong)"
        )
    if s[ACTOR + "m2_threshold"] is not None:
        notes.append(
            "m2_threshold: M2PO masks tokens by the sampler's log-probs; none on the toy's on-policy step"
        )
    clip = s[ACTOR + "optimizer.gradient_clipping"]
    if clip > 0:
        unmodelled.append(grad_clip_note(ACTOR + "optimizer.gradient_clipping", clip))
    return ToyMapping(
        ",".join(spec),
        {"group_size": ("gconfig.n_samples", group)},
        unmodelled,
        notes,
        step_responses=max(1, batch // minibatches),
    )


def _read_launch(words: list[Word], origin: str) -> Launch:
    """AReaL's arguments as load_expr_config reads them: argparse's `--config FILE` (the YAML the
    run starts from), the rest Hydra overrides composed on it; a launcher's first argument is the
    training script (`python3 -m areal.infra.launcher.local SCRIPT --config FILE ...`)."""
    rest: list[Word] = []
    files: list[str] = []
    skip_script = bool(words) and words[0].text.endswith(".py")
    pending = False
    for word in words[1:] if skip_script else words:
        name, equals, value = word.text.partition("=")
        if pending:
            files.append(word.text)
            pending = False
        elif name == "--config" and word.unknown:
            raise InvalidInput(f"{origin}: --config {word.text}: the file's path cannot be read")
        elif name == "--config":
            pending = not equals
            if equals:
                files.append(value)
        else:
            rest.append(word)
    if pending:
        raise InvalidInput(f"{origin}: --config without a file")
    launch = read_overrides(rest, origin, trainer="areal")
    launch.files = files
    return launch


# The sections of AReaL's experiment configuration (GRPOConfig: areal/api/cli_args.py), and its
# names that toyrl does not read, spelt close to ones it reads.
MARKS = (
    "actor.",
    "gconfig.",
    "rollout.",
    "ref.",
    "cluster.",
    "train_dataset.",
    "valid_dataset.",
    "saver.",
    "recover.",
    "evaluator.",
    "stats_logger.",
    "sglang.",
    "vllm.",  # OpenRLHF's too: keys under it count for neither
    "scheduler.",
    "perf_tracer.",
    "experiment_name",
    "trial_name",
    "total_train_epochs",
    "tokenizer_path",
)
OTHER_NAMES = frozenset(
    {
        "valid_dataset.batch_size",
        "critic.ppo_n_minibatches",
        "critic.optimizer.gradient_clipping",
        "ref.optimizer.gradient_clipping",
    }
)
DR_GRPO: dict[str, Levers] = {
    ACTOR + "reward_norm.mean_level": ("group",),
    ACTOR + "reward_norm.std_level": (None,),
    ACTOR + "reward_norm.group_size": lambda s: (s["gconfig.n_samples"],),
    ACTOR + "adv_norm": (None,),
    ACTOR + "use_sapo_loss": (False,),
}

TRAINER = Trainer(
    name="AReaL",
    distribution="areal",
    releases={
        "1.0.4": Release(
            SETTINGS_1_0_4,
            "areal/api/cli_args.py (PPOActorConfig, NormConfig), areal/trainer/ppo/actor.py, "
            "areal/utils/data.py (Normalization), areal/utils/functional/functional.py (ppo_actor_loss_fn) "
            "of areal 1.0.4",
            _mapping,
            dr_grpo=DR_GRPO,
        )
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
    entries=(
        Entry(module="areal.infra.launcher.*", read=_read_launch),
        Entry(module="areal.launcher.*", read=_read_launch),
        Entry(script="gsm8k_rl*.py", read=_read_launch),
        Entry(script="boba_grpo.py", read=_read_launch),
    ),
)
