#!/usr/bin/env bash
# Builds the OpenRLHF conformance environment: bash scripts/conformance/openrlhf.sh VENV_DIR
#
# A virtualenv of its own (never a dependency of toyrl) with the CPU build of torch 2.13.0, toyrl
# (this checkout, on sys.path by a .pth) and its runtime and test dependencies, then openrlhf==0.11.2 and
# exactly the packages that the tested modules import at load time (openrlhf.models.loss,
# openrlhf.trainer.ppo_utils.experience_maker, openrlhf.trainer.ray.ppo_actor,
# openrlhf.utils.loss_utils), each pinned and installed with --no-deps so that nothing can pull
# another torch. OpenRLHF's GPU-only and cluster imports (deepspeed, flash_attn, vllm, ray) are
# never called by the tested functions; tests/conformance/standins/openrlhf/ stands in for them,
# put on sys.path by a .pth file. Idempotent: an existing VENV_DIR is completed, not rebuilt.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 VENV_DIR" >&2
    exit 2
fi
venv=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
standins="$repo/tests/conformance/standins/openrlhf"

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

# torch first and alone: the CPU wheel on this machine's disk (no CUDA download).
"${pip[@]}" torch==2.13.0
constraints="$venv/torch-constraint.txt"
echo "torch==2.13.0" > "$constraints"

# toyrl and what it needs to run and to be tested.
# toyrl from this checkout, by a .pth onto its source: no build in the tree, which another
# install of the checkout may be using at the same time
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$repo" > "$site/toyrl-source.pth"
"${pip[@]}" -c "$constraints" numpy scipy pandas matplotlib typer joblib pytest pytest-timeout

# OpenRLHF without its declared requirements (deepspeed, flash-attn, vllm, ray, wandb, ...), and the
# modules its tested imports load: transformers and peft (openrlhf.models), accelerate (peft,
# transformers.trainer), torchdata (openrlhf.utils.deepspeed), pylatexenc and sympy
# (openrlhf.utils.math_utils, sympy already with torch), aiohttp (openrlhf.utils.agent, loaded
# by the vLLM engine module), with their own imports. pillow (openrlhf.utils.vlm_utils) comes with
# matplotlib.
"${pip[@]}" -c "$constraints" --no-deps \
    openrlhf==0.11.2 \
    transformers==5.15.0 \
    huggingface_hub==1.33.0 \
    tokenizers==0.22.2 \
    safetensors==0.8.0 \
    regex==2026.11.19 \
    PyYAML==6.0.4 \
    tqdm==4.70.1 \
    httpx==0.28.1 \
    httpcore==1.0.9 \
    h11==0.16.0 \
    anyio==4.16.0 \
    certifi==2026.10.19.post1 \
    idna==3.20 \
    peft==0.21.2 \
    accelerate==1.15.0 \
    psutil==7.2.2 \
    torchdata==0.11.0 \
    pylatexenc==2.11 \
    aiohttp==3.14.5 \
    aiohappyeyeballs==2.7.1 \
    aiosignal==1.4.0 \
    attrs==26.1.0 \
    frozenlist==1.8.0 \
    multidict==7.2.1 \
    propcache==0.5.4 \
    yarl==1.25.1

# The stand-ins on sys.path (they carry no package metadata, so transformers, accelerate and peft
# still see deepspeed and flash_attn as absent).
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$standins" > "$site/toyrl_conformance_openrlhf_standins.pth"

# The tested modules load, and the one torch is the CPU build.
"$venv/bin/python" - <<'EOF'
import torch

import openrlhf.models.loss
import openrlhf.trainer.ppo_utils.experience_maker
import openrlhf.trainer.ray.ppo_actor
import openrlhf.utils.loss_utils  # noqa: F401

assert torch.__version__.startswith("2.13.0"), torch.__version__
EOF
