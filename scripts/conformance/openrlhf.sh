#!/usr/bin/env bash
# Builds the OpenRLHF conformance environment:  bash scripts/conformance/openrlhf.sh VENV_DIR [VERSION]
#
# A virtualenv of its own (never a dependency of toyrl) with the CPU build of torch 2.13.0, toyrl
# (this checkout, on sys.path by a .pth) and its runtime and test dependencies, then openrlhf (VERSION,
# default 0.11.2) and exactly the packages that the tested modules import at load time (0.11.2 and
# 0.10.3: openrlhf.models.loss, openrlhf.trainer.ppo_utils.experience_maker,
# openrlhf.trainer.ray.ppo_actor, openrlhf.utils.loss_utils; 0.6.4: openrlhf.models.loss,
# openrlhf.trainer.ppo_utils, openrlhf.trainer.ray.ppo_actor), each pinned and installed with
# --no-deps so that nothing can pull another torch. OpenRLHF's GPU-only and cluster imports
# (deepspeed, flash_attn, vllm, ray) are never called by the tested functions;
# tests/conformance/standins/openrlhf/ stands in for them, put on sys.path by a .pth file.
# With the default release, the wheels of the older releases toyrl models (toyrl/trainers/openrlhf.py,
# RELEASES) are downloaded (not installed) into VENV_DIR/openrlhf-releases: the tests read each one's
# train_ppo_ray.py and loss path with `ast` (test_each_release_s_*).
# Idempotent: an existing VENV_DIR is completed, not rebuilt.
#
# The releases this script knows (tests/conformance/test_openrlhf.py follows the one it finds):
#   0.11.2  the pinned default (CI): the step's loss is normalised by the whole optimiser step.
#   0.10.3  the last release whose token-mean loss divides each micro-batch by its own tokens
#           (same import-time dependencies as 0.11.2, so the same pins).
#   0.6.4   the last release whose PolicyLoss is a mean of per-response token means; it imports
#           transformers 4 (it declares transformers==4.50.0), huggingface_hub 0.x and `datasets`
#           (openrlhf.utils.utils) with what they import, and `requests` (remote_rm_utils).
#           Two names it imports are not among the stand-ins (made for 0.11.2): deepspeed.ops.adam
#           (openrlhf.utils.deepspeed) and ray.actor.ActorHandle (an annotation in ppo_actor); the
#           tests register them (never-instantiated classes) before importing, as the check below.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 VENV_DIR [VERSION]" >&2
    exit 2
fi
venv=$1
version=${2:-0.11.2}
repo=$(cd "$(dirname "$0")/../.." && pwd)
standins="$repo/tests/conformance/standins/openrlhf"

# The release and the packages its tested imports load, each pinned (installed with --no-deps).
case "$version" in
    0.11.2 | 0.10.3)
        # transformers and peft (openrlhf.models), accelerate (peft, transformers.trainer), torchdata
        # (openrlhf.utils.deepspeed), pylatexenc and sympy (openrlhf.utils.math_utils, sympy
        # already with torch), aiohttp (openrlhf.utils.agent, loaded by the vLLM engine module),
        # with their own imports. pillow (openrlhf.utils.vlm_utils) comes with matplotlib.
        requirements=(
            openrlhf=="$version"
            transformers==5.15.0
            huggingface_hub==1.33.0
            tokenizers==0.22.2
            safetensors==0.8.0
            regex==2026.11.19
            PyYAML==6.0.4
            tqdm==4.70.1
            httpx==0.28.1
            httpcore==1.0.9
            h11==0.16.0
            anyio==4.16.0
            certifi==2026.10.19.post1
            idna==3.20
            peft==0.21.2
            accelerate==1.15.0
            psutil==7.2.2
            torchdata==0.11.0
            pylatexenc==2.11
            aiohttp==3.14.5
            aiohappyeyeballs==2.7.1
            aiosignal==1.4.0
            attrs==26.1.0
            frozenlist==1.8.0
            multidict==7.2.1
            propcache==0.5.4
            yarl==1.25.1
        )
        tested="openrlhf.models.loss openrlhf.trainer.ppo_utils.experience_maker openrlhf.trainer.ray.ppo_actor openrlhf.utils.loss_utils"
        ;;
    0.6.4)
        requirements=(
            openrlhf==0.6.4
            transformers==4.50.0
            huggingface_hub==0.36.2
            tokenizers==0.21.4
            safetensors==0.8.0
            regex==2026.11.19
            PyYAML==6.0.4
            tqdm==4.70.1
            requests==2.34.2
            charset-normalizer==3.5.3
            urllib3==2.8.0
            certifi==2026.10.19.post1
            idna==3.20
            peft==0.15.2
            accelerate==1.15.0
            psutil==7.2.2
            datasets==4.8.5
            pyarrow==26.0.1
            dill==0.4.1
            multiprocess==0.70.19
            xxhash==4.1.0
            httpx==0.28.1
            httpcore==1.0.9
            h11==0.16.0
            anyio==4.16.0
        )
        tested="openrlhf.models.loss openrlhf.trainer.ppo_utils openrlhf.trainer.ray.ppo_actor"
        ;;
    *)
        echo "openrlhf.sh: no pinned environment for openrlhf $version (known: 0.11.2, 0.10.3, 0.6.4)" >&2
        exit 2
        ;;
esac

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile)

# torch first and alone: the CPU wheel on this machine's disk (no CUDA download).
# shellcheck source=scripts/conformance/shared_torch.sh
. "$(dirname "$0")/shared_torch.sh"
shared_torch "$venv/bin/python"
constraints="$venv/torch-constraint.txt"
echo "torch==2.13.0" > "$constraints"

# toyrl and what it needs to run and to be tested.
# toyrl from this checkout, by a .pth onto its source: no build in the tree, which another
# install of the checkout may be using at the same time
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$repo" > "$site/toyrl-source.pth"
"${pip[@]}" -c "$constraints" numpy scipy pandas matplotlib typer joblib pytest pytest-timeout

# OpenRLHF without its declared requirements (deepspeed, flash-attn, vllm, ray, wandb, ...), and the
# modules its tested imports load (the list chosen above).
"${pip[@]}" -c "$constraints" --no-deps "${requirements[@]}"

# The stand-ins on sys.path (they carry no package metadata, so transformers, accelerate and peft
# still see deepspeed and flash_attn as absent).
echo "$standins" > "$site/toyrl_conformance_openrlhf_standins.pth"

# The tested modules load, the release is the one asked for, and the one torch is the CPU build.
"$venv/bin/python" - "$version" $tested <<'EOF_CHECK'
import importlib
import importlib.metadata
import sys
import types

import torch

version, modules = sys.argv[1], sys.argv[2:]
if version == "0.6.4":  # the two stand-ins tests/conformance/test_openrlhf.py's legacy_standins adds
    import ray
    from _standin import never_instantiated

    adam, actor = types.ModuleType("deepspeed.ops.adam"), types.ModuleType("ray.actor")
    adam.DeepSpeedCPUAdam = never_instantiated("deepspeed.ops.adam.DeepSpeedCPUAdam")
    adam.FusedAdam = never_instantiated("deepspeed.ops.adam.FusedAdam")
    actor.ActorHandle = never_instantiated("ray.actor.ActorHandle")
    ray.actor = actor
    sys.modules.update({"deepspeed.ops": types.ModuleType("deepspeed.ops"), "deepspeed.ops.adam": adam})
    sys.modules["ray.actor"] = actor
for name in modules:
    importlib.import_module(name)

assert importlib.metadata.version("openrlhf") == version, importlib.metadata.version("openrlhf")
assert torch.__version__.startswith("2.13.0"), torch.__version__
EOF_CHECK

# The wheels of the older releases toyrl models (toyrl/trainers/openrlhf.py's RELEASES), never installed.
if [ "$version" = "0.11.2" ]; then
    for release in 0.11.1 0.11.0 0.10.3 0.10.2 0.10.1.post2 0.9.10 0.9.7 0.8.8 0.8.7 0.8.6 0.8.5 0.8.4 0.8.2 \
        0.8.1.post1 0.8.0.post1 0.7.3 0.7.1.post2 0.6.4 0.6.3.post2 0.6.3.post1 0.6.0; do
        "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
            --dest "$venv/openrlhf-releases" "openrlhf==$release"
    done
fi
