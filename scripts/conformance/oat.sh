#!/usr/bin/env bash
# oat's conformance environment: bash scripts/conformance/oat.sh VENV_DIR
#
# A virtualenv with torch 2.13.0 (the CPU build on disk), toyrl (the checkout, on sys.path by a .pth) and its
# runtime deps, oat-llm 0.2.4 (--no-deps) and exactly the modules that the tested code
# (oat.algorithms.ppo.PPOLearner.learning_step and the batch oat.utils.data.TransitionDataset
# collates) calls: tqdm. oat-llm 0.2.4 declares Python < 3.11, so its wheel (pure Python) is
# downloaded for 3.10 and installed with --ignore-requires-python.
# Everything else that oat's modules import (vllm, deepspeed, flash-attn, launchpad, transformers,
# peft, ...: GPU stacks, services and model loaders that learning_step never calls) is a stand-in
# under tests/conformance/standins/oat, put on sys.path by a .pth file; each stand-in's docstring
# says what it replaces and why the tested code never calls it.
# Idempotent: an existing venv is reused and pip skips what is installed already.
set -euo pipefail

venv=${1:?usage: oat.sh VENV_DIR}
version=0.2.4
repo=$(cd "$(dirname "$0")/../.." && pwd)

# the venv, torch's CPU build (shared), toyrl from this checkout and its pinned runtime deps:
# sets venv (absolute), pip, constraints and site
# shellcheck source=scripts/conformance/shared_torch.sh
. "$(dirname "$0")/shared_torch.sh"
trainer_environment "$venv" "$repo"

# oat: the py3-none wheel, fetched as for Python 3.10 (its Requires-Python is < 3.11).
wheels="$venv/conformance-wheels"
if ! ls "$wheels"/oat_llm-"$version"-*.whl > /dev/null 2>&1; then
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --python-version 3.10 --only-binary=:all: -d "$wheels" "oat-llm==$version"
fi
"${pip[@]}" -c "$constraints" --no-deps --ignore-requires-python "$wheels"/oat_llm-"$version"-*.whl

# what the tested code calls besides torch and numpy: TransitionDataset's progress bar.
"${pip[@]}" -c "$constraints" --no-deps tqdm==4.67.1

# the stand-ins directory: it only provides modules that are not installed.
echo "$repo/tests/conformance/standins/oat" > "$site/toyrl-conformance-standins.pth"
