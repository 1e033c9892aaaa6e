"""The README and docs quote no number by hand: each one is rendered from a file a command generates.

Each fragment below is a phrase of the README or of a docs page (DOC_FRAGMENTS, by page) with `{file.key:format}` in place of its numbers;
`s.` keys come from results/seed_study.json (`python scripts/seed_study.py`), `i.` keys from
results/init_sensitivity.json (`python scripts/init_sensitivity.py`), `p.` keys from
results/presets.json (`python scripts/presets_study.py`), `t.` keys from results/trainer_defaults.json
(`python scripts/trainer_defaults_study.py`), `f.` keys from results/families.json
(`python scripts/families_study.py`), `w.` keys from results/verl_width.json
(`python scripts/verl_width_study.py`), `g.` keys from results/gpg_scale.json
(`python scripts/gpg_study.py`), `b.` keys from results/bridge_study.json (`python
scripts/bridge_study.py`, with the bridge extra). A fragment whose rendering is
not in the text fails: the text and the results cannot drift apart. Whitespace is normalised.
"""

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = re.compile(r"\{([^{}:]+):([^{}]*)\}")


def flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flatten(item, f"{prefix}.{key}").items()}
    return {prefix: value}


@functools.cache
def claims() -> dict[str, Any]:
    study = json.loads((ROOT / "results" / "seed_study.json").read_text())
    sensitivity = json.loads((ROOT / "results" / "init_sensitivity.json").read_text())
    presets = json.loads((ROOT / "results" / "presets.json").read_text())
    defaults = json.loads((ROOT / "results" / "trainer_defaults.json").read_text())
    families = json.loads((ROOT / "results" / "families.json").read_text())
    width = json.loads((ROOT / "results" / "verl_width.json").read_text())
    gpg = json.loads((ROOT / "results" / "gpg_scale.json").read_text())
    gpg["meta"] |= {"seed_count": len(gpg["meta"]["seeds"]), "last_seed": max(gpg["meta"]["seeds"])}
    bridge = json.loads((ROOT / "results" / "bridge_study.json").read_text())
    runs, fits = bridge["cpu_seconds"].values(), [fit["cpu_seconds"] for fit in bridge["fits"].values()]
    bridge["spans"] = {
        "run_cpu_min": min(runs),
        "run_cpu_max": max(runs),
        "fit_cpu_min": min(fits),
        "fit_cpu_max": max(fits),
        # the step from which every seed's GRPO network stays above Dr. GRPO's (None: one never does)
        "grpo_above_from": max(bridge["derived"]["gaps"]["grpo"]["stays_above_from"]),
    }
    return (
        flatten(study, "s")
        | flatten(sensitivity, "i")
        | flatten(presets, "p")
        | flatten(defaults, "t")
        | flatten(families, "f")
        | flatten(width, "w")
        | flatten(gpg, "g")
        | flatten(bridge, "b")
    )


def render(fragment: str, values: dict[str, Any]) -> str:
    return PLACEHOLDER.sub(lambda m: format(values[m.group(1)], m.group(2)), " ".join(fragment.split()))


def normalised(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


BRIDGE = "b.derived.gaps"
BRIDGE_LEVELS = "b.derived.levels"
DOC_FRAGMENTS = {
    "docs/bridge.md": [
        "(the study below: {b.spans.run_cpu_min:.0f}–{b.spans.run_cpu_max:.0f} CPU-s a 150-step run); "
        "the fit of a seed {b.spans.fit_cpu_min:.1f}–{b.spans.fit_cpu_max:.1f}.",
        "costs about 10 CPU-s, against {b.spans.run_cpu_min:.0f}–{b.spans.run_cpu_max:.0f} for a 150-step run",
        *(
            f"| `{label}`{extra}, {source} | {{{BRIDGE}.{label}.50.{source}.mean:+.1f}} ± "
            f"{{{BRIDGE}.{label}.50.{source}.se:.1f}} | {{{BRIDGE}.{label}.150.{source}.mean:+.1f}} ± "
            f"{{{BRIDGE}.{label}.150.{source}.se:.1f}} |"
            for label, extra in (("grpo", ""), ("dapo", " (TRL's defaults)"))
            for source in ("network", "toy")
        ),
        "the network's gap is above 0 from step {b.spans.grpo_above_from:d} on in every seed",
        "and ends at {b.derived.gaps.grpo.150.network.mean:+.1f} ± {b.derived.gaps.grpo.150.network.se:.1f} "
        "tokens against the toy's {b.derived.gaps.grpo.150.toy.mean:+.1f} ± {b.derived.gaps.grpo.150.toy.se:.1f}",
        "wrong answers grow from {b.derived.levels.grpo.network.length_incorrect.9:.1f} to "
        "{b.derived.levels.grpo.network.length_incorrect.150:.1f} tokens of 64 "
        "(toy {b.derived.levels.grpo.toy.length_incorrect.150:.1f})",
        "while Dr. GRPO's go from {b.derived.levels.dr_grpo.network.length_incorrect.9:.1f} to "
        "{b.derived.levels.dr_grpo.network.length_incorrect.150:.1f} "
        "(toy {b.derived.levels.dr_grpo.toy.length_incorrect.150:.1f})",
        "drift little in the toy ({b.derived.gaps.dapo.150.toy.mean:+.1f} ± {b.derived.gaps.dapo.150.toy.se:.1f} "
        "tokens) and not measurably in the network ({b.derived.gaps.dapo.150.network.mean:+.1f} ± "
        "{b.derived.gaps.dapo.150.network.se:.1f})",
        "{b.derived.levels.dr_grpo.network.accuracy.150:.2f} for Dr. GRPO and "
        "{b.derived.levels.grpo.network.accuracy.150:.2f} for GRPO at step 150, against the toy's "
        "{b.derived.levels.dr_grpo.toy.accuracy.150:.2f} and {b.derived.levels.grpo.toy.accuracy.150:.2f}",
        "({b.derived.levels.grpo.network.truncated.150:.0%} of completions at step 150 against the toy's "
        "{b.derived.levels.grpo.toy.truncated.150:.0%})",
        "correct answers end at {b.derived.levels.grpo.network.length_correct.150:.1f} tokens "
        "(toy {b.derived.levels.grpo.toy.length_correct.150:.1f})",
        "{b.derived.levels.grpo.network.off_ramble.150:.1%} of GRPO's ramble positions at step 150",
        "clipped {b.derived.levels.grpo.network.clipped_share:.1%} of GRPO's steps and none of the others'",
        "peaks at {b.derived.seeds_network.grpo.0.peak_incorrect:.1f} tokens at step "
        "{b.derived.seeds_network.grpo.0.peak_step:d} and falls to {b.derived.seeds_network.grpo.0.last_incorrect:.1f} "
        "by step 150, where {b.derived.seeds_network.grpo.0.last_off_ramble:.1%} of its ramble positions hold "
        "other tokens, its correct answers are {b.derived.seeds_network.grpo.0.last_correct:.1f} tokens long and "
        "`max_grad_norm` has clipped {b.derived.seeds_network.grpo.0.clipped_steps:d} of its steps",
        "end at {b.derived.seeds_network.grpo.1.last_incorrect:.1f} and "
        "{b.derived.seeds_network.grpo.2.last_incorrect:.1f} tokens, unclipped",
    ],
    "README.md": [
        "incorrect responses grow to {s.headline.six.grpo.final.length_incorrect.mean:,.0f}",
        "tokens of a 1,500-token cap and its accuracy stalls at {s.headline.six.grpo.final.accuracy_pct.mean:.1f}",
        "its incorrect responses end at {s.headline.six.dr_grpo.final.length_incorrect.mean:.0f}",
        "tokens, and its accuracy at {s.headline.six.dr_grpo.final.accuracy_pct.mean:.1f}",
        "policy GRPO's cosine to ∇J is {s.bias.init.grpo.cosine.six.min:.3f}",
        "–{s.bias.init.grpo.cosine.six.max:.3f}",
        "wrong answers end {w.sizes.16.difference_length_incorrect.mean:.0f}",
        "± {w.sizes.16.difference_length_incorrect.se:.0f} tokens longer than under Dr. GRPO with micro-batches of 16",
        "over {w.meta.seed_count:d} paired seeds",
        "wrong answers end {t.cases.ms_swift_default.difference_length_incorrect.mean:.0f}",
        "± {t.cases.ms_swift_default.difference_length_incorrect.se:.0f} tokens longer than under Dr. GRPO "
        "with ms-swift's `loss_type grpo` and {t.cases.slime_default.difference_length_incorrect.mean:.0f}",
        "± {t.cases.slime_default.difference_length_incorrect.se:.0f} with slime's per-sample mean",
        "the cap ({p.final.dapo_overlong_filtering.length_wrong_approach.mean:,.0f} of 1,500 tokens)",
        "GRPO's wrong answers end {b.derived.gaps.grpo.150.network.mean:.1f} ± {b.derived.gaps.grpo.150.network.se:.1f} "
        "tokens longer than Dr. GRPO's in the network and {b.derived.gaps.grpo.150.toy.mean:.1f} ± "
        "{b.derived.gaps.grpo.150.toy.se:.1f} in the toy, above it from step {b.spans.grpo_above_from:d} on in every seed",
        "TRL's defaults (`dapo`) drift {b.derived.gaps.dapo.150.toy.mean:+.1f} ± {b.derived.gaps.dapo.150.toy.se:.1f} "
        "in the toy and {b.derived.gaps.dapo.150.network.mean:+.1f} ± {b.derived.gaps.dapo.150.network.se:.1f} in the "
        "network. Accuracy does not transfer: {b.derived.levels.dr_grpo.network.accuracy.150:.2f} for Dr. GRPO's "
        "network at step 150, {b.derived.levels.dr_grpo.toy.accuracy.150:.2f} for its toy.",
    ],
    "docs/results.md": [
        "Over seeds 0–5 GRPO reaches {s.headline.six.grpo.final.accuracy_pct.mean:.1f}",
        "± {s.headline.six.grpo.final.accuracy_pct.se:.1f}",
        "% and length-only {s.headline.six.length_only.final.accuracy_pct.mean:.1f}",
        "± {s.headline.six.length_only.final.accuracy_pct.se:.1f}",
        "Over 100 seeds the means are {s.headline.all.grpo.final.accuracy_pct.mean:.2f}",
        "± {s.headline.all.grpo.final.accuracy_pct.se:.2f}",
        "% and {s.headline.all.length_only.final.accuracy_pct.mean:.2f}",
        "± {s.headline.all.length_only.final.accuracy_pct.se:.2f}",
        "are still about one 6-seed SE ({s.headline.six.grpo.final.accuracy_pct.se:.1f}",
        "seeds GRPO − length-only is {s.pairing.all.grpo_minus_length_only.accuracy_pct.paired_mean:+.3f}",
        "± {s.pairing.all.grpo_minus_length_only.accuracy_pct.paired_se:.3f}",
        "independent runs would give an SE of {s.pairing.all.grpo_minus_length_only.accuracy_pct.unpaired_se:.3f}",
        "at the article's six seeds ({s.pairing.six.grpo_minus_length_only.accuracy_pct.paired_mean:+.2f}",
        "± {s.pairing.six.grpo_minus_length_only.accuracy_pct.paired_se:.2f}",
        "length-only's final accuracies correlate {s.pairing.all.corr.grpo_length_only.accuracy_pct:.2f}",
        "GRPO** raises accuracy from {s.headline.six.initial.accuracy_pct.mean:.1f}",
        "% to {s.headline.six.dr_grpo.final.accuracy_pct.mean:.1f}",
        "start: E[L | incorrect] goes from {s.dr_grpo_curves.six.initial_incorrect:.0f}",
        "to {s.dr_grpo_curves.six.final_incorrect:.0f}",
        "tokens ({s.dr_grpo_curves.all.final_incorrect:.0f}",
        "incorrect length first rises to {s.dr_grpo_curves.six.max_incorrect_0_50:.0f}",
        "(step {s.dr_grpo_curves.six.max_incorrect_step:.0f}",
        "; over 100 seeds {s.dr_grpo_curves.all.max_incorrect_overall:.0f}",
        "at step {s.dr_grpo_curves.all.max_incorrect_overall_step:.0f}",
        "correct length only from step {s.dr_grpo_curves.six.stays_below_from_step:.0f}",
        "on (seeds 0–5; from step {s.dr_grpo_curves.all.stays_below_from_step:.0f}",
        "and at step 400 it is below in {s.dr_grpo_curves.six.final_fraction_incorrect_below:.0%}",
        "of the six seeds and {s.dr_grpo_curves.all.final_fraction_incorrect_below:.0%}",
        "GRPO incorrect responses run to {s.headline.six.grpo.final.length_incorrect.mean:,.0f}",
        "a wrong approach. GRPO gives {s.article.l_plus_1.sampled_six.grpo.length_wrong_approach.mean:,.0f}",
        "± {s.article.l_plus_1.sampled_six.grpo.length_wrong_approach.se:.0f}",
        "(z = {s.article.l_plus_1.sampled_six.grpo.length_wrong_approach.z:+.1f}",
        "against 1,410) and length-only {s.article.l_plus_1.sampled_six.length_only.length_wrong_approach.mean:,.0f}",
        "± {s.article.l_plus_1.sampled_six.length_only.length_wrong_approach.se:.0f}",
        "(z = {s.article.l_plus_1.sampled_six.length_only.length_wrong_approach.z:+.1f}",
        "responses, does not match: GRPO gives {s.article.l_plus_1.sampled_six.grpo.length_incorrect.mean:,.0f}",
        "± {s.article.l_plus_1.sampled_six.grpo.length_incorrect.se:.0f}",
        "(z = {s.article.l_plus_1.sampled_six.grpo.length_incorrect.z:+.1f}",
        "the wrong-approach length is {s.article.l_plus_1.sampled_all.grpo.length_wrong_approach.diff:+.0f}",
        "tokens off (z = {s.article.l_plus_1.sampled_all.grpo.length_wrong_approach.z:+.1f}",
        "), the incorrect length {s.article.l_plus_1.sampled_all.grpo.length_incorrect.diff:+.0f}",
        "flips: GRPO's E[L | incorrect] is {s.article.l_plus_1.meanfield_six.grpo.length_incorrect.mean:,.0f}",
        "and its E[L | wrong approach] {s.article.l_plus_1.meanfield_six.grpo.length_wrong_approach.mean:,.0f}",
        "wrong-approach length falls to {s.article.l.sampled_six.grpo.length_wrong_approach.mean:,.0f}",
        "0–5), and GRPO's accuracy to {s.article.l.sampled_six.grpo.accuracy_pct.mean:.1f}",
        "moves its final accuracy by {s.convention.all.grpo.accuracy_pct.paired_mean:+.2f}",
        "± {s.convention.all.grpo.accuracy_pct.paired_se:.2f}",
        "its E[L | wrong approach] by {s.convention.all.grpo.length_wrong_approach.paired_mean:+.1f}",
        "± {s.convention.all.grpo.length_wrong_approach.paired_se:.1f}",
        "27.4 % over 100 seeds is about {i.calibration.L.crossing_mean:.1f}",
        "instead of {i.calibration.L + 1.crossing_mean:.1f}",
        "{t.cases.verl_grpo.difference_length_incorrect.mean:.0f}",
        "{t.cases.openrlhf_group_norm.difference_length_incorrect.mean:.0f}",
        "{t.cases.openrlhf_dr_grpo.difference_length_incorrect.mean:.0f}",
        "GRPO − Dr. GRPO is {s.pairing.six.grpo_minus_dr_grpo.accuracy_pct.paired_mean:+.1f}",
        "probability down from 1/700 to 1 in {s.stops.six.grpo.stop_prob_wrong.inverse_of_mean:,.0f}",
        "under Dr. GRPO it ends at 1 in {s.stops.six.dr_grpo.stop_prob_wrong.inverse_of_mean:,.0f}",
        "% to {f.variants.alpha_1.0.accuracy_pct.mean:.1f}",
    ],
    "docs/practitioners.md": [
        "{t.cases.verl_grpo.difference_length_incorrect.mean:.0f} ± {t.cases.verl_grpo.difference_length_incorrect.se:.0f} "
        "with verl's GRPO defaults",
        "toy. Incorrect responses end at {p.final.trl_dr_grpo_loss_only.length_incorrect.mean:.0f}",
        "tokens, against Dr. GRPO's {p.final.dr_grpo.length_incorrect.mean:.0f}",
        "and GRPO's {p.final.grpo.length_incorrect.mean:,.0f}",
        "loss drifts like GRPO**, to {p.final.length_only.length_incorrect.mean:,.0f}",
        "and with it wrong answers end at {p.final.openrlhf_dr_grpo.length_incorrect.mean:.0f}",
        "sends wrong answers to the cap: {p.final.dapo_overlong_filtering.length_wrong_approach.mean:,.0f}",
        "wrong answers end {w.sizes.16.difference_length_incorrect.mean:.0f}",
        "± {w.sizes.16.difference_length_incorrect.se:.0f} tokens longer than under Dr. GRPO with micro-batches of 16",
        "responses and {w.sizes.4.difference_length_incorrect.mean:.0f}",
        "± {w.sizes.4.difference_length_incorrect.se:.0f} with 4, and with `use_dynamic_bsz`",
        "{w.budgets.16384.difference_length_incorrect.mean:.0f} ± {w.budgets.16384.difference_length_incorrect.se:.0f} at",
        "its default budget of 16,384 tokens and {w.budgets.4096.difference_length_incorrect.mean:.0f}",
        "± {w.budgets.4096.difference_length_incorrect.se:.0f} at 4,096",
        "over {w.meta.seed_count:d} paired seeds",
        "Dr. GRPO by {t.cases.trl_default.difference_length_incorrect.mean:.0f}",
        "± {t.cases.trl_default.difference_length_incorrect.se:.0f} tokens with TRL's defaults,",
        "{t.cases.verl_grpo.difference_length_incorrect.mean:.0f}",
        "± {t.cases.verl_grpo.difference_length_incorrect.se:.0f} with verl's GRPO defaults",
        "{t.cases.openrlhf_group_norm.difference_length_incorrect.mean:.0f}",
        "± {t.cases.openrlhf_group_norm.difference_length_incorrect.se:.0f} with OpenRLHF's `group_norm`",
        "{t.cases.openrlhf_dr_grpo.difference_length_incorrect.mean:.0f}",
        "± {t.cases.openrlhf_dr_grpo.difference_length_incorrect.se:.0f} with its `dr_grpo` estimator",
        '`critic_type="grpo"` ends {t.cases.oat_grpo.difference_length_incorrect.mean:.0f}',
        "± {t.cases.oat_grpo.difference_length_incorrect.se:.0f} tokens longer",
        "dynamic sampling (`dapo`), wrong answers end at {p.final.dapo.length_incorrect.mean:.0f}",
        "tokens, below Dr. GRPO's {p.final.dr_grpo.length_incorrect.mean:.0f}",
        "at {p.final.dapo.accuracy_pct.mean:.1f} % accuracy",
    ],
    "docs/researchers.md": [
        "% to {s.headline.six.dr_grpo.final.accuracy_pct.mean:.1f}",
        "ratio (G−1)/(G·L_norm). At all {s.bias.dr_grpo.states:.0f}",
        "cosine deviates from 1 by at most {s.bias.dr_grpo.max_cosine_deviation:.0e}",
        "policy GRPO's cosine to ∇J is {s.bias.init.grpo.cosine.six.min:.3f}",
        "–{s.bias.init.grpo.cosine.six.max:.3f}",
        "over seeds 0–5 ({s.bias.init.grpo.cosine.all.mean:.3f}",
        "± {s.bias.init.grpo.cosine.all.se:.3f}",
        "cosine with the φ_wrong axis is {s.bias.init.grpo.phi_wrong_cosine.six.min:.2f}",
        "to {s.bias.init.grpo.phi_wrong_cosine.six.max:.2f}",
        "(seed 0: {s.bias.init.grpo.phi_wrong_cosine.six.seed0:.3f}",
        "answers longer. That axis holds {s.bias.init.grpo.phi_wrong_share.six.min:.2f}",
        "–{s.bias.init.grpo.phi_wrong_share.six.max:.2f}",
        "of E[ĝ]'s squared norm (seed 0: {s.bias.init.grpo.phi_wrong_share.six.seed0:.2f}",
        "; over 100 seeds {s.bias.init.grpo.phi_wrong_share.all.mean:.2f}",
        "± {s.bias.init.grpo.phi_wrong_share.all.se:.2f}",
        "points against ∇J, with cosine {s.bias.step100.grpo.cosine.six.mean:.2f}",
        "(mean over seeds 0–5, range {s.bias.step100.grpo.cosine.six.min:.2f}",
        "to {s.bias.step100.grpo.cosine.six.max:.2f}",
        "{t.cases.verl_grpo.difference_length_incorrect.mean:.0f}",
        "{t.cases.openrlhf_dr_grpo.difference_length_incorrect.mean:.0f}",
        "mean, wrong answers end at {f.variants.gspo.length_incorrect.mean:.0f}",
        "tokens under GSPO and {f.variants.sapo.length_incorrect.mean:.0f}",
        "under SAPO, against {f.variants.seq_mean_mb4.length_incorrect.mean:.0f}",
        "are PPO's to the bit, at {f.variants.cispo.length_incorrect.mean:.0f}",
        "0 to 1, wrong answers end at {f.variants.alpha_0.0.length_incorrect.mean:.0f}",
        "down to {f.variants.alpha_1.0.length_incorrect.mean:.0f}",
        "tokens, accuracy rises from {f.variants.alpha_0.0.accuracy_pct.mean:.1f}",
        "% to {f.variants.alpha_1.0.accuracy_pct.mean:.1f}",
        "along training, goes from {f.variants.alpha_0.0.cosine_along_mean.mean:.2f}",
        "to {f.variants.alpha_1.0.cosine_along_mean.mean:.2f}",
        "wrong answers still end at {f.variants.alpha_0.9.length_incorrect.mean:.0f}",
        "wrong answers end at {f.variants.gfpo.length_incorrect.mean:.0f}",
        "tokens, at {f.variants.gfpo.accuracy_pct.mean:.1f}",
        "E[g] has cosine {f.variants.gfpo.cosine_initial.mean:.2f}",
        "and it samples {f.variants.gfpo.tokens_per_step.mean:,.0f}",
        "a step against Dr. GRPO's {f.variants.dr_grpo.tokens_per_step.mean:,.0f}",
        "correct short answers too: {f.variants.gfpo_token_efficiency.length_incorrect.mean:.0f}",
        "wrong answers shortest**, at {f.variants.dapo_overlong.length_incorrect.mean:.0f}",
        "below its correct ones ({f.variants.dapo_overlong.length_correct.mean:.0f}",
        "cosine to ∇J of accuracy is {f.variants.dapo_overlong.cosine_initial.mean:.2f}",
        "the token mean puts it ({f.variants.dynamic_sampling.length_incorrect.mean:.0f}",
        "against {f.variants.token_mean.length_incorrect.mean:.0f}",
        "and costs {f.variants.dynamic_sampling.tokens_per_step.mean:,.0f}",
        "tokens a step against {f.variants.token_mean.tokens_per_step.mean:,.0f}",
        "the plain token mean**, to {f.variants.opo.length_incorrect.mean:.0f}",
        "the mean of {f.meta.mc_draws:,} sampled first updates",
    ],
    "docs/explorer.md": [
        "GRPO's fall from 1/700 to 1/{s.stops.six.grpo.stop_prob_wrong.inverse_of_mean:,.0f}",
    ],
    "docs/researchers.md#gpg": [
        "by {g.paired.constant_minus_dr_grpo.mean:+.3f} ± {g.paired.constant_minus_dr_grpo.se:.3f} points",
        "averaged over seeds 0–{g.meta.last_seed:d} it falls from {g.scale.start:.2f} at step 0 to {g.scale.end:.2f} at step 399",
        "GPG's final accuracy is {g.paired.gpg_minus_without_scale.mean:.2f} ± {g.paired.gpg_minus_without_scale.se:.2f} points",
        "({g.arms.gpg.final_accuracy_pct.mean:.2f} % against {g.arms.without_scale.final_accuracy_pct.mean:.2f} %",
        "paired over the {g.meta.seed_count:d} seeds",
    ],
}

VARIANTS_DOC_FRAGMENTS = [
    "here. Incorrect responses end at {p.final.trl_dr_grpo_loss_only.length_incorrect.mean:.0f}",
    "tokens, against {p.final.trl_dr_grpo.length_incorrect.mean:.0f}",
    "for full Dr. GRPO and {p.final.trl_grpo.length_incorrect.mean:,.0f}",
    "lengthens more than under Dr. GRPO: {p.final.trl_default.length_wrong_approach.mean:.0f}",
    "± {p.final.trl_default.length_wrong_approach.sd:.0f}",
    "against {p.final.trl_dr_grpo.length_wrong_approach.mean:.0f}",
    "± {p.final.trl_dr_grpo.length_wrong_approach.sd:.0f}",
    "per-response mean: `length_only` (Dr. GRPO's advantage, GRPO's per-response mean) drifts like GRPO, to "
    "{p.final.length_only.length_incorrect.mean:,.0f}",
    "its wrong answers end at {p.final.openrlhf_dr_grpo.length_incorrect.mean:.0f}",
    "± {p.final.openrlhf_dr_grpo.length_incorrect.sd:.0f} tokens (`openrlhf_dr_grpo`)",
    "per-response mean and drifts like GRPO, to {p.final.openrlhf_dr_grpo@0.10.3.length_incorrect.mean:,.0f}",
    "0.11.2's token mean ends at {p.final.openrlhf_dr_grpo.length_incorrect.mean:.0f}",
    "approach's expected length goes to {p.final.dapo_overlong_filtering.length_wrong_approach.mean:,.0f}",
    "cap, while accuracy drops to {p.final.dapo_overlong_filtering.accuracy_pct.mean:.1f}",
    "Its wrong answers end at {p.final.dapo.length_incorrect.mean:.0f}",
    "± {p.final.dapo.length_incorrect.sd:.0f} tokens, below Dr. GRPO's {p.final.dr_grpo.length_incorrect.mean:.0f}",
    "{p.final.dapo.accuracy_pct.mean:.1f} % accuracy. The row changes three switches",
]

BIAS_DOC_FRAGMENTS = [
    "(tests for G = 4, 8, 16). At the {s.bias.dr_grpo.states:.0f}",
    "study the cosine is 1 within {s.bias.dr_grpo.max_cosine_deviation:.0e}",
    "the norm ratio 7/12000 within {s.bias.dr_grpo.max_norm_ratio_relative_deviation:.0e}",
    "---: | ---: | ---: | | `grpo` | {s.bias.init.grpo.cosine.six.min:.3f}",
    "to {s.bias.init.grpo.cosine.six.max:.3f}",
    "| {s.bias.init.grpo.cosine.all.mean:.3f}",
    "± {s.bias.init.grpo.cosine.all.se:.3f}",
    "| {s.bias.init.grpo.phi_wrong_cosine.six.min:.3f}",
    "to {s.bias.init.grpo.phi_wrong_cosine.six.max:.3f}",
    "| {s.bias.init.grpo.phi_wrong_share.six.min:.3f}",
    "to {s.bias.init.grpo.phi_wrong_share.six.max:.3f}",
    "| {s.bias.init.grpo.phi_wrong_share.all.mean:.3f}",
    "± {s.bias.init.grpo.phi_wrong_share.all.se:.3f}",
    "| | `std_only` | {s.bias.init.std_only.cosine.six.min:.5f}",
    "to {s.bias.init.std_only.cosine.six.max:.5f}",
    "| {s.bias.init.std_only.cosine.all.mean:.5f}",
    "± {s.bias.init.std_only.cosine.all.se:.0e}",
    "1e-29) | 0 | | `length_only` | {s.bias.init.length_only.cosine.six.min:.3f}",
    "to {s.bias.init.length_only.cosine.six.max:.3f}",
    "| {s.bias.init.length_only.cosine.all.mean:.3f}",
    "± {s.bias.init.length_only.cosine.all.se:.3f}",
    "| {s.bias.init.length_only.phi_wrong_cosine.six.min:.3f}",
    "to {s.bias.init.length_only.phi_wrong_cosine.six.max:.3f}",
    "| {s.bias.init.length_only.phi_wrong_share.six.min:.3f}",
    "to {s.bias.init.length_only.phi_wrong_share.six.max:.3f}",
    "| {s.bias.init.length_only.phi_wrong_share.all.mean:.3f}",
    "± {s.bias.init.length_only.phi_wrong_share.all.se:.3f}",
    "(`toyrl bias`), GRPO's cosine is {s.bias.init.grpo.cosine.six.seed0:.3f}",
    ", its φ_wrong cosine {s.bias.init.grpo.phi_wrong_cosine.six.seed0:.3f}",
    "and its φ_wrong share {s.bias.init.grpo.phi_wrong_share.six.seed0:.3f}",
    "---: | ---: | ---: | | `grpo` | {s.bias.step100.grpo.cosine.six.mean:.2f}",
    "({s.bias.step100.grpo.cosine.six.min:.2f}",
    "to {s.bias.step100.grpo.cosine.six.max:.2f}",
    ") | {s.bias.step400.grpo.cosine.six.mean:.2f}",
    "({s.bias.step400.grpo.cosine.six.min:.2f}",
    "to {s.bias.step400.grpo.cosine.six.max:.2f}",
    ") | {s.bias.step100.grpo.phi_wrong_share.six.mean:.2f}",
    "({s.bias.step100.grpo.phi_wrong_share.six.min:.2f}",
    "to {s.bias.step100.grpo.phi_wrong_share.six.max:.2f}",
    ") | {s.bias.step400.grpo.phi_wrong_share.six.mean:.2f}",
    "({s.bias.step400.grpo.phi_wrong_share.six.min:.2f}",
    "to {s.bias.step400.grpo.phi_wrong_share.six.max:.2f}",
    ") | | `std_only` | {s.bias.step100.std_only.cosine.six.mean:.4f}",
    "| {s.bias.step400.std_only.cosine.six.mean:.4f}",
    "| 0 | 0 | | `length_only` | {s.bias.step100.length_only.cosine.six.mean:.2f}",
    "({s.bias.step100.length_only.cosine.six.min:.2f}",
    "to {s.bias.step100.length_only.cosine.six.max:.2f}",
    ") | {s.bias.step400.length_only.cosine.six.mean:.2f}",
    "({s.bias.step400.length_only.cosine.six.min:.2f}",
    "to {s.bias.step400.length_only.cosine.six.max:.2f}",
    ") | {s.bias.step100.length_only.phi_wrong_share.six.mean:.2f}",
    "({s.bias.step100.length_only.phi_wrong_share.six.min:.2f}",
    "to {s.bias.step100.length_only.phi_wrong_share.six.max:.2f}",
    ") | {s.bias.step400.length_only.phi_wrong_share.six.mean:.2f}",
    "({s.bias.step400.length_only.phi_wrong_share.six.min:.2f}",
    "to {s.bias.step400.length_only.phi_wrong_share.six.max:.2f}",
    "already has a φ_wrong cosine of {s.bias.init.grpo.phi_wrong_cosine.all.mean:.2f}",
    "± {s.bias.init.grpo.phi_wrong_cosine.all.se:.2f}",
    "(100 seeds), a share of {s.bias.init.grpo.phi_wrong_share.all.mean:.2f}",
    "the six runs (GRPO's cosine {s.bias.step100.grpo.cosine.six.min:.2f}",
    "to {s.bias.step100.grpo.cosine.six.max:.2f}",
    "seed: GRPO's cosine ranges from {s.bias.step400.grpo.cosine.six.min:.2f}",
    "to {s.bias.step400.grpo.cosine.six.max:.2f}",
    "E[L | wrong approach] ends at {s.headline.six.dr_grpo.final.length_wrong_approach.mean:.0f}",
    "± {s.headline.six.dr_grpo.final.length_wrong_approach.sd:.0f}",
    "direction is not ∇J's: its cosine is {s.bias.init.std_only.cosine.all.mean:.5f}",
    "division's final accuracy is {s.pairing.all.std_only_minus_dr_grpo.accuracy_pct.paired_mean:+.2f}",
    "± {s.pairing.all.std_only_minus_dr_grpo.accuracy_pct.paired_se:.2f}",
    "---: | ---: | ---: | | `grpo` | {s.meanfield.grpo.final.accuracy_pct.mean:.1f}",
    "± {s.meanfield.grpo.final.accuracy_pct.sd:.1f}",
    "| {s.meanfield.grpo.final.length_mean.mean:.0f}",
    "± {s.meanfield.grpo.final.length_mean.sd:.0f}",
    "| {s.meanfield.grpo.final.length_correct.mean:.0f}",
    "± {s.meanfield.grpo.final.length_correct.sd:.0f}",
    "| {s.meanfield.grpo.final.length_incorrect.mean:.0f}",
    "± {s.meanfield.grpo.final.length_incorrect.sd:.0f}",
    "| {s.meanfield.grpo.final.length_wrong_approach.mean:.0f}",
    "± {s.meanfield.grpo.final.length_wrong_approach.sd:.0f}",
    "| | `std_only` | {s.meanfield.std_only.final.accuracy_pct.mean:.1f}",
    "± {s.meanfield.std_only.final.accuracy_pct.sd:.1f}",
    "| {s.meanfield.std_only.final.length_mean.mean:.0f}",
    "± {s.meanfield.std_only.final.length_mean.sd:.0f}",
    "| {s.meanfield.std_only.final.length_correct.mean:.0f}",
    "± {s.meanfield.std_only.final.length_correct.sd:.0f}",
    "| {s.meanfield.std_only.final.length_incorrect.mean:.0f}",
    "± {s.meanfield.std_only.final.length_incorrect.sd:.0f}",
    "| {s.meanfield.std_only.final.length_wrong_approach.mean:.0f}",
    "± {s.meanfield.std_only.final.length_wrong_approach.sd:.0f}",
    "| | `length_only` | {s.meanfield.length_only.final.accuracy_pct.mean:.1f}",
    "± {s.meanfield.length_only.final.accuracy_pct.sd:.1f}",
    "| {s.meanfield.length_only.final.length_mean.mean:.0f}",
    "± {s.meanfield.length_only.final.length_mean.sd:.0f}",
    "| {s.meanfield.length_only.final.length_correct.mean:.0f}",
    "± {s.meanfield.length_only.final.length_correct.sd:.0f}",
    "| {s.meanfield.length_only.final.length_incorrect.mean:.0f}",
    "± {s.meanfield.length_only.final.length_incorrect.sd:.0f}",
    "| {s.meanfield.length_only.final.length_wrong_approach.mean:.0f}",
    "± {s.meanfield.length_only.final.length_wrong_approach.sd:.0f}",
    "| | `dr_grpo` | {s.meanfield.dr_grpo.final.accuracy_pct.mean:.1f}",
    "± {s.meanfield.dr_grpo.final.accuracy_pct.sd:.1f}",
    "| {s.meanfield.dr_grpo.final.length_mean.mean:.0f}",
    "± {s.meanfield.dr_grpo.final.length_mean.sd:.0f}",
    "| {s.meanfield.dr_grpo.final.length_correct.mean:.0f}",
    "± {s.meanfield.dr_grpo.final.length_correct.sd:.0f}",
    "| {s.meanfield.dr_grpo.final.length_incorrect.mean:.0f}",
    "± {s.meanfield.dr_grpo.final.length_incorrect.sd:.0f}",
    "| {s.meanfield.dr_grpo.final.length_wrong_approach.mean:.0f}",
    "± {s.meanfield.dr_grpo.final.length_wrong_approach.sd:.0f}",
    "change over every step and seed is {s.meanfield.dr_grpo.wrong_approach_max_change:.1f}",
    "GRPO without std division it runs to {s.meanfield.grpo.final.length_wrong_approach.mean:,.0f}",
    "accuracy than the sampled ones: {s.meanfield.dr_grpo.final.accuracy_pct.mean:.0f}",
    "% against {s.headline.six.dr_grpo.final.accuracy_pct.mean:.0f}",
    "% for Dr. GRPO, and {s.meanfield.grpo.final.accuracy_pct.mean:.0f}",
    "% against {s.headline.six.grpo.final.accuracy_pct.mean:.1f}",
]

TRAINERS_DOC_FRAGMENTS = [
    "| | neither (GRPO) | `grpo` | {p.final.grpo.accuracy_pct.mean:.1f}",
    "± {p.final.grpo.accuracy_pct.sd:.1f}",
    "| {p.final.grpo.length_incorrect.mean:.0f}",
    "± {p.final.grpo.length_incorrect.sd:.0f}",
    "with `seq-mean-token-mean`) | `length_only` | {p.final.length_only.accuracy_pct.mean:.1f}",
    "± {p.final.length_only.accuracy_pct.sd:.1f}",
    "| {p.final.length_only.length_incorrect.mean:.0f}",
    "± {p.final.length_only.length_incorrect.sd:.0f}",
    "`seq-mean-token-sum-norm`) | `std_only` | {p.final.std_only.accuracy_pct.mean:.1f}",
    "± {p.final.std_only.accuracy_pct.sd:.1f}",
    "| {p.final.std_only.length_incorrect.mean:.0f}",
    "± {p.final.std_only.length_incorrect.sd:.0f}",
    "both (Dr. GRPO) | `dr_grpo` | {p.final.dr_grpo.accuracy_pct.mean:.1f}",
    "± {p.final.dr_grpo.accuracy_pct.sd:.1f}",
    "| {p.final.dr_grpo.length_incorrect.mean:.0f}",
    "± {p.final.dr_grpo.length_incorrect.sd:.0f}",
    "over 100 seeds, `std_only` ends {s.pairing.all.std_only_minus_dr_grpo.accuracy_pct.paired_mean:+.2f}",
    "± {s.pairing.all.std_only_minus_dr_grpo.accuracy_pct.paired_se:.2f}",
    "wrong answers end {w.sizes.16.difference_length_incorrect.mean:.0f} ± {w.sizes.16.difference_length_incorrect.se:.0f} tokens longer than under Dr. GRPO with micro-batches of 16,",
    "{w.sizes.4.difference_length_incorrect.mean:.0f} ± {w.sizes.4.difference_length_incorrect.se:.0f} with 4 and",
    "{w.sizes.1.difference_length_incorrect.mean:.0f} ± {w.sizes.1.difference_length_incorrect.se:.0f} with 1;",
    "with 64 (half the batch) the difference is {w.sizes.64.difference_length_incorrect.mean:.0f} ± {w.sizes.64.difference_length_incorrect.se:.0f} token.",
    "the difference is {w.budgets.16384.difference_length_incorrect.mean:.0f} ± {w.budgets.16384.difference_length_incorrect.se:.0f} tokens at the default budget of",
    "16,384 tokens and {w.budgets.4096.difference_length_incorrect.mean:.0f} ± {w.budgets.4096.difference_length_incorrect.se:.0f} at 4,096.",
]


@pytest.mark.parametrize(
    ("page", "fragment"), [(page, fragment) for page, items in DOC_FRAGMENTS.items() for fragment in items]
)
def test_every_number_the_readme_and_the_guides_quote_comes_from_a_generated_file(
    page: str, fragment: str
) -> None:
    rendered = render(fragment, claims())
    assert rendered in normalised(ROOT / page.split("#")[0]), rendered


@pytest.mark.parametrize("fragment", BIAS_DOC_FRAGMENTS)
def test_every_number_docs_bias_quotes_comes_from_a_generated_file(fragment: str) -> None:
    rendered = render(fragment, claims())
    assert rendered in normalised(ROOT / "docs" / "bias.md"), rendered


def test_the_bounds_docs_bias_states_hold_in_the_generated_file() -> None:
    """'1 (within 1e-15)', '0 (below 1e-14)', '0 (below 1e-29)': Dr. GRPO's and std-only's rows,
    at every state the study evaluates (rounding around an exact 1 or 0)."""
    bias = json.loads((ROOT / "results" / "seed_study.json").read_text())["bias"]
    for key, value in bias.items():
        parts = key.split(".")
        if len(parts) < 4 or parts[1] not in ("std_only", "dr_grpo") or key.endswith((".sd", ".se")):
            continue
        variant, metric = parts[1], parts[2]
        if metric == "phi_wrong_cosine":
            assert abs(value) < 1e-14, key
        elif metric == "phi_wrong_share":
            assert value < 1e-29, key
        elif metric == "cosine" and variant == "dr_grpo":
            assert abs(value - 1) < 1e-15, key
    assert bias["dr_grpo.max_cosine_deviation"] < 1e-15


@pytest.mark.parametrize("fragment", VARIANTS_DOC_FRAGMENTS)
def test_every_number_docs_variants_quotes_comes_from_a_generated_file(fragment: str) -> None:
    rendered = render(fragment, claims())
    assert rendered in normalised(ROOT / "docs" / "variants.md"), rendered


@pytest.mark.parametrize("fragment", TRAINERS_DOC_FRAGMENTS)
def test_every_number_docs_trainers_quotes_comes_from_a_generated_file(fragment: str) -> None:
    rendered = render(fragment, claims())
    assert rendered in normalised(ROOT / "docs" / "trainers.md"), rendered


def test_docs_variants_includes_the_families_study_and_each_family_s_spec() -> None:
    import dataclasses

    from toyrl.expected import exact_support
    from toyrl.stages import REGISTRY
    from toyrl.variants import VARIANTS

    doc = (ROOT / "docs" / "variants.md").read_text(encoding="utf-8")
    for table in (ROOT / "results" / "families.md").read_text(encoding="utf-8").split("\n\n")[1::2]:
        assert table.strip() in doc
    families = doc.split("## The length-aware families", 1)[1].split("### One study", 1)[0]
    rows = [line for line in families.splitlines() if line.startswith("| `")]
    assert len(rows) == 12
    for row in rows[:-1]:
        name = row.split("`")[1]
        variant = VARIANTS[name]
        assert f"| `{variant.spec_text()}` |" in row, name
        first = dataclasses.replace(
            variant, objective=REGISTRY["objective"]["ppo_clip"], schedule=REGISTRY["schedule"]["epochs"]
        )
        assert row.endswith("| exact |") == (exact_support(first) == ""), name


def test_docs_variants_includes_the_generated_presets_table() -> None:
    table = (ROOT / "results" / "presets.md").read_text(encoding="utf-8").split("\n\n", 1)[1].strip()
    assert table in (ROOT / "docs" / "variants.md").read_text(encoding="utf-8")


def test_docs_trainers_includes_the_generated_table_of_every_trainer_s_defaults() -> None:
    """docs/trainers.md's one table of every trainer's default, what it does to length on the toy
    and the setting that makes it Dr. GRPO's loss is results/trainer_defaults.md's, as the study
    wrote it; and it has a row for every trainer modelled."""
    from toyrl.trainers import registry

    parts = (ROOT / "results" / "trainer_defaults.md").read_text(encoding="utf-8").split("\n\n")
    table, short = parts[1].strip(), parts[3].strip()
    assert table in (ROOT / "docs" / "trainers.md").read_text(encoding="utf-8")
    labels = {row.split(" | ")[0].removeprefix("| ").split(":")[0] for row in table.splitlines()[2:]}
    assert labels == {trainer.name for trainer in registry().values()}
    # the README's short table: one row a trainer, its default, as the study wrote it
    assert short in (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [row.split(" | ")[0].removeprefix("| ") for row in short.splitlines()[2:]]
    assert [row.rsplit(" ", 1)[0] for row in rows] == [trainer.name for trainer in registry().values()]


# The teaching table quotes `toyrl examples` (each example's `numbers`, `e.NAME.KEY`; `_inverse` is 1/value).
EXAMPLE_FRAGMENTS = [
    "GRPO's per-token weights {e.length.grpo_weight_correct:.5f} and {e.length.grpo_weight_wrong_800:.5f}",
    "({e.length.grpo_gentleness:.0f}× gentler on the long wrong answer",
    "Dr. GRPO's {e.length.dr_weight_correct:.6f} and {e.length.dr_weight_wrong:.6f} with L_norm = 2000",
    "({e.length.dr_push_down_800_vs_200:.0f}× the total push-down for 4× the tokens)",
    "a 1-in-8 prompt gets {e.difficulty.grpo_relative_k1:.0%} vs {e.difficulty.dr_relative_k1:.0%}",
    "a flattening of up to {e.difficulty.max_flattening:.1f}×",
    "a single success has std {e.difficulty.std_g64_single:.3f} and weight {e.difficulty.weight_g64_single:.1f}",
    "advantage {e.difficulty.advantage_g16_single_dr:.2f}, not {e.difficulty.advantage_g16_single_grpo:.1f}",
    "1/{e.four.grpo_y1_inverse:.0f} → 1/{e.four.length_only_y1_inverse:.0f} (no std) → 1/{e.four.dr_grpo_y1_inverse:.0f}",
    "{e.baseline.mean_ratio_k2:g}, {e.baseline.mean_ratio_k4:g}, {e.baseline.mean_ratio_k8:g} of the true gradient",
    "and {e.baseline.rloo_ratio_k2:g} for the leave-one-out (RLOO) baseline",
]


@functools.cache
def example_numbers() -> dict[str, Any]:
    from toyrl.examples import EXAMPLES

    values: dict[str, Any] = {}
    for name, make in EXAMPLES.items():
        for key, value in make().to_dict()["numbers"].items():
            values[f"e.{name}.{key}"] = value
            if isinstance(value, float) and value:
                values[f"e.{name}.{key}_inverse"] = 1 / value
    return values


@pytest.mark.parametrize("fragment", EXAMPLE_FRAGMENTS)
def test_every_number_of_the_teaching_table_is_what_toyrl_examples_computes(fragment: str) -> None:
    rendered = render(fragment, example_numbers()).replace("-0", "−0")  # the page's true minus sign
    assert rendered in normalised(ROOT / "docs" / "teachers.md"), rendered


@pytest.mark.parametrize("name", ["bench.txt", "bench_core.txt", "bench_waits.txt", "bench_bridge.txt"])
def test_docs_performance_shows_the_committed_benchmark(name: str) -> None:
    """Timings are this machine's, so they are not regenerated here; the text must be the file's."""
    bench = (ROOT / "results" / name).read_text(encoding="utf-8").strip()
    assert f"```\n{bench}\n```" in (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")


def test_the_readme_shows_the_measured_test_times_within_five_minutes() -> None:
    """results/test_times.txt (scripts/time_tests.py) is in the README as written, and the README's
    test command took at most 5 minutes there; the slow tests are timed beside it."""
    times = (ROOT / "results" / "test_times.txt").read_text(encoding="utf-8").strip()
    assert f"```\n{times}\n```" in (ROOT / "README.md").read_text(encoding="utf-8")
    fast, slow = times.splitlines()
    assert fast.startswith("python -m pytest ") and slow.startswith("python -m pytest -m slow ")
    minutes = float(re.search(r"([\d.]+) minutes", fast).group(1))  # type: ignore[union-attr]
    assert minutes <= 5.0, fast


def test_docs_results_includes_the_generated_tables() -> None:
    readme = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    study = (ROOT / "results" / "seed_study.md").read_text(encoding="utf-8")
    headline = study.split("## Headline figures\n\n", 1)[1].split("\n\n", 1)[0].strip()
    assert headline in readme
    assert (ROOT / "figures" / "final_numbers.md").read_text(encoding="utf-8") in readme


def test_the_readme_test_command_is_the_one_ci_runs_and_pins_a_cpu_torch() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.+?)\n```", setup)
    assert commands == ["pip install . && toyrl reproduce", commands[1]] and len(commands) == 2
    assert "torch==2.13.0" in commands[1].split() and "python -m pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()
    # The project's own files install everything the tests need: nothing resolves a bare torch.
    assert "pytest-timeout" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_the_readme_is_short_with_the_set_up_first() -> None:
    """At most 300 lines, the set-up's heading before line 40, then a first `toyrl run`."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, len(lines)
    assert lines.index("## Set-up") < 40
    assert lines.index("## Set-up") < lines.index("## A first run")


def test_the_readme_first_run_prints_what_the_readme_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's first `toyrl run`, run here: its standard output is the block the README shows."""
    from typer.testing import CliRunner

    from toyrl.cli import app

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A first run", 1)[1].split("\n## ", 1)[0]
    command, shown = re.findall(r"```(?:bash)?\n(.+?)\n```", section, flags=re.DOTALL)[:2]
    words = command.split()
    assert words[:2] == ["toyrl", "run"]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, words[1:], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == shown.strip()


def test_every_relative_link_of_the_readme_and_docs_leads_to_a_file() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}"


def test_the_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The researchers' example of the README, executed as written (figures drawn off screen)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```python\n(.+?)\n```", readme, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    open_before = set(plt.get_fignums())
    exec(compile(example, "README.md", "exec"), namespace)
    for number in set(plt.get_fignums()) - open_before:  # the example's figures
        plt.close(number)
    assert set(namespace["frame"]["variant"]) == {"grpo", "dr_grpo"}
    assert namespace["frame"].attrs["toyrl"]["config"]["group_size"] == 16
    assert not list(tmp_path.iterdir())


def test_docs_bridge_quotes_the_committed_bridge_benchmark() -> None:
    """docs/bridge.md's two CPU times are results/bench_bridge.txt's, and both are within the minute."""
    bench = (ROOT / "results" / "bench_bridge.txt").read_text(encoding="utf-8")
    cold = float(re.search(r"empty fit cache: ([\d.]+) CPU-s", bench).group(1))  # type: ignore[union-attr]
    warm = float(re.search(r"start cached: ([\d.]+) CPU-s", bench).group(1))  # type: ignore[union-attr]
    assert f"{cold:.1f} and {warm:.1f} CPU-s against the budget of a minute" in normalised(
        ROOT / "docs" / "bridge.md"
    )
    assert warm < cold < 60


def test_the_length_figure_captions_quote_the_paired_difference_final_numbers_gives() -> None:
    """The README's and docs/results.md's caption of the length figure quotes GRPO − Dr. GRPO of
    E[L | incorrect] at the last step, with its interval, as figures/final_numbers.md (written by
    `toyrl plot`) gives it."""
    numbers = (ROOT / "figures" / "final_numbers.md").read_text(encoding="utf-8")
    step = re.search(r"Final step \((\d+)\)", numbers).group(1)  # type: ignore[union-attr]
    differences = numbers.split("Paired differences from Dr. GRPO", 1)[1]
    seeds = re.search(r"percentile bootstrap over (\d+) seeds", differences).group(1)  # type: ignore[union-attr]
    header, _, *rows = [line for line in differences.splitlines() if line.startswith("|")]
    titles = [cell.strip() for cell in header.strip("|").split(" | ")]
    (grpo,) = [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows if "| `grpo` |" in row]
    cell = grpo[titles.index("E[L \\| incorrect]")]
    mean, low, high = re.fullmatch(r"(\S+) \((\S+) to (\S+)\)", cell).groups()  # type: ignore[union-attr]
    claim = (
        f"At step {step} GRPO's wrong answers are {mean} tokens longer than Dr. GRPO's (E[L | incorrect], "
        f"95% CI {low} to {high}; paired bootstrap over {seeds} seeds)"
    )
    for page in ("README.md", "docs/results.md"):
        assert claim in normalised(ROOT / page), (page, claim)


def test_the_readme_s_trainer_claims_are_the_study_s() -> None:
    """The README says which trainers no setting makes Dr. GRPO's loss, and that Unsloth's one
    setting does: `toyrl check`'s answers in results/trainer_defaults.json."""
    cases = json.loads((ROOT / "results" / "trainer_defaults.json").read_text())["cases"]
    text = normalised(ROOT / "README.md")
    assert "no setting of NeMo-RL, slime, prime-rl, EasyR1 or AReaL divides by a constant" in text
    for key in ("nemo_rl_default", "slime_default", "prime_rl_default", "easyr1_default", "areal_grpo"):
        assert cases[key]["to_dr_grpo"] is None, key
    assert "Unsloth's `loss_type=\"dr_grpo\"` alone is Dr. GRPO's loss" in text
    assert cases["unsloth_default"]["to_dr_grpo"] == {"loss_type": "dr_grpo"}
    assert cases["unsloth_dr_grpo"]["setting"]["spec"] == cases["unsloth_dr_grpo"]["dr_grpo"]["spec"]
