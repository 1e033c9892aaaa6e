#!/usr/bin/env bash
# SkyRL's conformance environment: bash scripts/conformance/skyrl.sh VENV_DIR
#
# A virtualenv with torch 2.13.0 (the CPU build on disk), toyrl (the checkout, on sys.path by a
# .pth) and its runtime deps, skyrl 0.3.0 (--no-deps: the pure-Python wheel) and exactly the
# modules that the tested code imports: skyrl/backends/skyrl_train/utils/ppo_utils.py (the advantage
# estimators, the policy losses, apply_loss_reduction_to_advantages_minibatch, reduce_loss) and what
# it imports at load: skyrl.train.config (omegaconf, PyYAML), the io helpers (fsspec, torch's own
# dependency), jaxtyping and loguru. Ray and skyrl_gym, which those modules import but the tested
# functions never call, are stand-ins
# under tests/conformance/standins/skyrl, put on sys.path by a .pth file; each stand-in's docstring
# says what it replaces and why the tested code never calls it; so does skyrl.backends.backend's (the
# Tinker API server's interface, whose pydantic models pydantic refuses on this machine's Python
# 3.11), which the test puts in sys.modules. No vLLM, no flash-attn, no models.
# Idempotent: an existing venv is reused and pip skips what is installed already.
set -euo pipefail

venv=${1:?usage: skyrl.sh VENV_DIR}
version=0.3.0
repo=$(cd "$(dirname "$0")/../.." && pwd)

# the venv, torch's CPU build (shared), toyrl from this checkout and its pinned runtime deps:
# sets venv (absolute), pip, constraints and site
# shellcheck source=scripts/conformance/shared_torch.sh
. "$(dirname "$0")/shared_torch.sh"
trainer_environment "$venv" "$repo"

# SkyRL, without its dependencies (vLLM, Ray, flash-attn, transformers, ...: none on the tested path).
"${pip[@]}" -c "$constraints" --no-deps "skyrl==$version"

# what the tested modules import at load, each pinned with its own dependencies.
"${pip[@]}" -c "$constraints" --no-deps jaxtyping==0.3.9 wadler_lindig==0.1.7 loguru==0.7.3 \
    omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 PyYAML==6.0.4

# the stand-ins directory: it only provides modules that are not installed.
echo "$repo/tests/conformance/standins/skyrl" > "$site/toyrl-conformance-standins.pth"
"$venv/bin/python" -c "
import sys, _skyrl_backend_standin
sys.modules['skyrl.backends.backend'] = _skyrl_backend_standin
import skyrl.backends.skyrl_train.utils.ppo_utils"
