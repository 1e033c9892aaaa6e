"""OpenRLHF's releases from 0.6.0 (the first with group_norm) to 0.11.2 in `toyrl check`
(toyrl/trainers/openrlhf.py's RELEASES): each release's mapping of a GRPO-like and a Dr. GRPO-like
setting, its verdict through the CLI, the refusal of a release not modelled, and the names a
release's own parser does not take.

Each release's defaults and loss path are tied to its own wheel by the conformance suite
(tests/conformance/test_openrlhf.py, `test_each_release_s_*`); here, what the table makes of them,
against what each release's code does as read in OpenRLHF's history (the expected values below
are written out, not computed by toyrl).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_check import invoke
from toyrl.config import InvalidInput
from toyrl.trainers import ToyMapping, resolve
from toyrl.trainers.openrlhf import RELEASES, TRAINER
from toyrl.variants import parse_variant

# Each release's loss on 4 prompts x 8 samples in one optimiser step (train_batch_size 32) at its
# own default micro-batch size: each response's token mean averaged (0.6.x; 0.10.0 to 0.10.3 by
# micro-batches of one sample), each micro-batch's token mean (0.7.0 to 0.9.10: 8 micro-batches
# of 4), the step's token mean (0.10.4 on). And whether rloo is whitened over the tokens (< 0.8.5).
RESPONSE, MICRO_BATCH, STEP = "seq_mean_token_mean", "token_mean per micro-batch", "token_mean"
EXPECTED = {
    "0.11.2": (STEP, False),
    "0.11.1": (STEP, False),
    "0.11.0": (STEP, False),
    "0.10.3": (RESPONSE, False),
    "0.10.2": (RESPONSE, False),
    "0.10.1.post2": (RESPONSE, False),
    "0.9.10": (MICRO_BATCH, False),
    "0.9.7": (MICRO_BATCH, False),
    "0.8.8": (MICRO_BATCH, False),
    "0.8.7": (MICRO_BATCH, False),
    "0.8.6": (MICRO_BATCH, False),
    "0.8.5": (MICRO_BATCH, False),
    "0.8.4": (MICRO_BATCH, True),
    "0.8.2": (MICRO_BATCH, True),
    "0.8.1.post1": (MICRO_BATCH, True),
    "0.8.0.post1": (MICRO_BATCH, True),
    "0.7.3": (MICRO_BATCH, True),
    "0.7.1.post2": (MICRO_BATCH, True),
    "0.6.4": (RESPONSE, True),
    "0.6.3.post2": (RESPONSE, True),
    "0.6.3.post1": (RESPONSE, True),
    "0.6.0": (RESPONSE, True),
}
WITHOUT_DR_GRPO = ("0.6.3.post1", "0.6.0")  # dr_grpo is an estimator from 0.6.3.post2 on


def own(version: str, settings: dict[str, object]) -> dict[str, object]:
    """`settings` (by 0.10.2's names) by the release's own names (flat before 0.10.2)."""
    if "algo.advantage.estimator" in TRAINER.releases[version].settings:
        return settings
    return {TRAINER.releases[version].aliases[key][0]: value for key, value in settings.items()}


def group(estimator: str, version: str) -> dict[str, object]:
    return own(
        version,
        {
            "algo.advantage.estimator": estimator,
            "rollout.n_samples_per_prompt": 8,
            "rollout.batch_size": 4,
            "train.batch_size": 32,
        },
    )


def normaliser(mapping: ToyMapping) -> str:
    """The mapping's normaliser; per micro-batch, the toy's optimiser steps are cut into micro-batches
    of the trainer's size (`toyrl.trainers.check`), here 4 samples (the default before 0.10.0)."""
    variant = parse_variant(mapping.spec)
    name = variant.names()["normaliser"]
    if variant.normaliser.per_micro_batch:
        assert mapping.micro_batch_responses == 4, mapping
        return f"{name} per micro-batch"
    assert mapping.micro_batch_responses is None, mapping
    return name


def test_the_releases_are_newest_first_with_what_changed() -> None:
    versions = [tuple(int(p.removeprefix("post")) for p in v.split(".")) for v in TRAINER.releases]
    assert versions == sorted(versions, reverse=True) and TRAINER.latest == "0.11.2"
    assert list(RELEASES) == list(TRAINER.releases) == list(EXPECTED)
    assert all(covers and changed for covers, changed in RELEASES.values())
    assert "0.10.4-0.11.0" in TRAINER.releases["0.11.0"].source


@pytest.mark.parametrize("version", list(EXPECTED))
def test_each_release_maps_a_grpo_and_a_dr_grpo_setting_as_its_code(version: str) -> None:
    scope, rloo_whitened = EXPECTED[version]
    grpo = resolve("openrlhf", version, group("group_norm", version)).mapping
    assert parse_variant(grpo.spec).names()["advantage"] == "group_std_sample" and normaliser(grpo) == scope
    rloo = resolve("openrlhf", version, group("rloo", version)).mapping.spec
    assert parse_variant(rloo).names()["advantage"] == ("token_whiten" if rloo_whitened else "rloo")
    if version in WITHOUT_DR_GRPO:
        with pytest.raises(InvalidInput, match="advantage_estimator='dr_grpo' is not valid") as error:
            resolve("openrlhf", version, group("dr_grpo", version))
        assert "\n" not in str(error.value)
        return
    dr_grpo = resolve("openrlhf", version, group("dr_grpo", version)).mapping
    assert parse_variant(dr_grpo.spec).names()["advantage"] == "none" and normaliser(dr_grpo) == scope


TINY = ["--steps", "4", "--prompts", "4", "--batch-prompts", "4", "--seeds", "2", "--quiet"]


@pytest.mark.parametrize("version", list(EXPECTED))
def test_check_gives_each_release_s_verdict(version: str) -> None:
    """`toyrl check --trainer openrlhf --version V` runs each release modelled, by its own names, a
    GRPO-like and a Dr. GRPO-like setting (the latter refused in one line where the release has
    no dr_grpo)."""
    for estimator in ("group_norm", "dr_grpo"):
        sets = [f"--set={key}={value}" for key, value in group(estimator, version).items()]
        code, stdout, stderr = invoke("check", "--trainer", "openrlhf", "--version", version, *sets, *TINY)
        if estimator == "dr_grpo" and version in WITHOUT_DR_GRPO:
            assert code == 2 and stdout == "" and stderr.count("\n") == 1
            assert "advantage_estimator='dr_grpo' is not valid" in stderr
            continue
        assert code == 0, stderr
        lines = stdout.splitlines()
        assert lines[1].startswith(f"OpenRLHF {version} (") and f"of {RELEASES[version][0]}:" in lines[1]
        assert not any(line.startswith("note: ") and " is " in line and "renamed" in line for line in lines)
        assert any(line.startswith("verdict: ") for line in lines)


SMALL = ["--steps", "30", "--prompts", "8", "--batch-prompts", "4", "--seeds", "3", "--quiet", "--json"]


def test_the_older_normalisers_drift_more() -> None:
    """group_norm's wrong answers grow longer than under Dr. GRPO in every release; more where the
    loss is each response's token mean (0.6.4) or the micro-batch's (0.8.2, 4 samples) than where it
    is the optimiser step's (0.11.2): by more than 4 standard errors each."""
    drift = {}
    for version in ("0.6.4", "0.8.2", "0.11.2"):
        sets = [f"--set={key}={value}" for key, value in group("group_norm", version).items()]
        code, stdout, stderr = invoke("check", "--trainer", "openrlhf", "--version", version, *sets, *SMALL)
        assert code == 0, stderr
        result = json.loads(stdout)
        assert result["verdict"].startswith("length drift"), result["verdict"]
        drift[version] = result["difference_length_incorrect"]
    for more, less in (("0.6.4", "0.11.2"), ("0.8.2", "0.11.2")):
        gap = drift[more]["mean"] - drift[less]["mean"]
        assert gap > 4 * (drift[more]["se"] ** 2 + drift[less]["se"] ** 2) ** 0.5, (more, less, drift)


def test_a_release_not_modelled_is_refused_in_one_line() -> None:
    code, stdout, stderr = invoke("check", "--trainer", "openrlhf", "--version", "0.7.0", *TINY)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "--version 0.7.0 of OpenRLHF is not modelled; modelled: " + ", ".join(RELEASES) in stderr
    with pytest.raises(InvalidInput, match=re.escape("--version 0.5.9 of OpenRLHF is not modelled")):
        resolve("openrlhf", "0.5.9", {})


@pytest.mark.parametrize(
    ("version", "key", "why"),
    [
        ("0.8.2", "dual_clip", "an argument of OpenRLHF 0.8.6 and later"),
        ("0.8.2", "actor.dual_clip", "an argument of OpenRLHF 0.8.6 and later"),
        ("0.11.0", "actor.loss_agg_mode", "an argument of OpenRLHF 0.11.2 and later"),
        ("0.11.0", "algo.kl.unbiased_gradient", "an argument of OpenRLHF 0.11.1 and later"),
        ("0.9.10", "generate_max_len", "an argument of OpenRLHF 0.9.7 and earlier"),
        ("0.9.7", "max_new_tokens", "an argument of OpenRLHF 0.9.8 and later"),
        ("0.6.3.post1", "use_kl_estimator_k3", "an argument of OpenRLHF 0.6.0 and earlier"),
        ("0.6.0", "kl_estimator", "an argument of OpenRLHF 0.6.0.post1 and later"),
        ("0.7.3", "ds_tensor_parallel_size", "an argument of OpenRLHF 0.7.4 and later"),
        ("0.11.2", "use_kl_estimator_k3", "a name before OpenRLHF 0.10.2"),
        ("0.11.2", "micro_train_batch_size", "a name before OpenRLHF 0.10.2"),
    ],
)
def test_a_name_the_release_s_parser_does_not_take_is_refused(version: str, key: str, why: str) -> None:
    with pytest.raises(
        InvalidInput,
        match=re.escape(f"OpenRLHF {version} has no setting {key!r}: its parser refuses it ({why})"),
    ) as error:
        resolve("openrlhf", version, {key: "1"})
    assert "\n" not in str(error.value)


def test_a_script_s_flag_the_release_does_not_have_is_told(tmp_path: Path) -> None:
    """From a script the check goes on with the release's own settings and says which flags its
    parser would stop at; the newer name of a setting it has is read as its own."""
    script = tmp_path / "train.sh"
    script.write_text(
        "python3 -m openrlhf.cli.train_ppo_ray --advantage_estimator group_norm --n_samples_per_prompt 8 \\\n"
        "    --rollout_batch_size 4 --train_batch_size 32 --dual_clip 3 --actor.eps_clip 0.3\n"
    )
    code, stdout, stderr = invoke("check", str(script), "--trainer", "openrlhf", "--version", "0.8.2", *TINY)
    assert code == 0, stderr
    assert "note: dual_clip: OpenRLHF 0.8.2 refuses it (an argument of OpenRLHF 0.8.6 and later)" in stdout
    assert "note: actor.eps_clip is eps_clip (its name since OpenRLHF 0.10.2" in stdout
    assert "epsilon=0.3" in stdout and "dual_clip=3" not in stdout


def test_0_6_0_s_k3_switch_is_its_kl_estimator() -> None:
    k3 = {"advantage_estimator": "group_norm", "use_kl_loss": True, "use_kl_estimator_k3": True}
    assert parse_variant(resolve("openrlhf", "0.6.0", k3).mapping.spec).kl.beta == 0.01
    k1 = resolve("openrlhf", "0.6.0", k3 | {"use_kl_estimator_k3": False}).mapping
    assert "beta" not in k1.spec and any("estimator k1 in the loss" in u for u in k1.unmodelled)


def test_packed_samples_are_the_micro_batch_s_token_mean_before_0_7() -> None:
    packed = group("group_norm", "0.6.4") | {"packing_samples": True}
    assert normaliser(resolve("openrlhf", "0.6.4", packed).mapping) == MICRO_BATCH
    with pytest.raises(InvalidInput, match="has no setting 'packing_samples' that toyrl knows"):
        resolve("openrlhf", "0.7.3", packed)


def test_tensor_parallelism_keeps_the_order_from_0_8_1() -> None:
    steps = {"advantage_estimator": "group_norm", "rollout_batch_size": 16, "n_samples_per_prompt": 8}
    steps |= {"train_batch_size": 32, "micro_train_batch_size": 32, "ds_tensor_parallel_size": 2}
    older = resolve("openrlhf", "0.8.0.post1", steps).mapping
    assert parse_variant(older.spec).schedule.shuffle == "epoch"
    assert any("shuffles the replay buffer with tensor parallelism too" in n for n in older.notes)
    assert parse_variant(resolve("openrlhf", "0.8.1.post1", steps).mapping.spec).schedule.shuffle == "none"


def test_dynamic_batching_s_normaliser_follows_the_release() -> None:
    dynamic = group("group_norm", "0.9.7") | {"use_dynamic_batch": True}
    weighted = resolve("openrlhf", "0.9.7", dynamic).mapping
    assert normaliser(weighted) == STEP
    assert any("dynamic_loss_scale" in u for u in weighted.unmodelled)
    step = resolve(
        "openrlhf",
        "0.10.3",
        own("0.10.3", {"train.dynamic_batch_enable": True}) | group("group_norm", "0.10.3"),
    )
    assert normaliser(step.mapping) == STEP and not any(
        "dynamic_loss_scale" in u for u in step.mapping.unmodelled
    )


def test_gspo_s_loss_is_each_sample_s_mean_from_0_8_9() -> None:
    for version, scope in (("0.8.8", MICRO_BATCH), ("0.9.7", RESPONSE)):
        gspo = resolve(
            "openrlhf", version, group("group_norm", version) | {"policy_loss_type": "gspo"}
        ).mapping
        assert parse_variant(gspo.spec).names()["objective"] == "gspo" and normaliser(gspo) == scope, version


def test_the_unbiased_kl_gradient_is_left_out_and_said() -> None:
    kl = group("group_norm", "0.11.1") | {"algo.kl.use_loss": True, "algo.kl.estimator": "k3"}
    assert parse_variant(resolve("openrlhf", "0.11.1", kl).mapping.spec).kl.beta == 0.01
    unbiased = resolve("openrlhf", "0.11.1", kl | {"algo.kl.unbiased_gradient": True}).mapping
    assert "beta" not in unbiased.spec and any("unbiased_gradient" in u for u in unbiased.unmodelled)


def test_an_entropy_coefficient_of_0_adds_nothing() -> None:
    default = resolve("openrlhf", "0.7.3", group("group_norm", "0.7.3"))
    assert default.values["entropy_loss_coef"] == 0.0
    assert not any("entropy" in u for u in default.mapping.unmodelled)
    bonus = resolve("openrlhf", "0.7.3", group("group_norm", "0.7.3") | {"entropy_loss_coef": 0.01})
    assert any(u.startswith("entropy_loss_coef=0.01: an entropy bonus") for u in bonus.mapping.unmodelled)


def test_the_overlong_buffer_is_a_share_of_generate_max_len_before_0_9_8() -> None:
    overlong = group("group_norm", "0.8.7") | {"overlong_buffer_len": 256}
    assert "buffer=0.25" in resolve("openrlhf", "0.8.7", overlong).mapping.spec  # of 1024
    later = group("group_norm", "0.9.10") | {"overlong_buffer_len": 256}
    assert "buffer=0.125" in resolve("openrlhf", "0.9.10", later).mapping.spec  # of max_len 2048
    with pytest.raises(InvalidInput, match=re.escape("overlong_buffer_len=2000.0 must be in (0, 1024]")):
        resolve("openrlhf", "0.8.7", overlong | {"overlong_buffer_len": 2000})
