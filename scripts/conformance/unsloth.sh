#!/usr/bin/env bash
# Unsloth's conformance environment: bash scripts/conformance/unsloth.sh VENV_DIR
#
# A virtualenv with torch 2.13.0 (the CPU build on disk), toyrl (the checkout, on sys.path by a .pth) and its
# runtime deps, unsloth 2026.10.9 and unsloth_zoo 2026.10.9 (both --no-deps), and what
# `import unsloth_zoo.rl_replacements` needs on a machine without a GPU (unsloth_zoo 2026.10.9 has a
# CPU backend: its GPU patches are skipped): transformers (<= 5.17.0, as unsloth_zoo declares),
# datasets, and their dependencies, pinned. unsloth itself is installed only because unsloth_zoo's
# __init__ looks for it (find_spec("unsloth")); the tests never import it (its import patches TRL
# and transformers for a GPU), and set UNSLOTH_IS_PRESENT=1 as its __init__ does.
# Idempotent: an existing venv is reused and pip skips what is installed already.
set -euo pipefail

venv=${1:?usage: unsloth.sh VENV_DIR}
version=2026.10.9
repo=$(cd "$(dirname "$0")/../.." && pwd)

# the venv, torch's CPU build (shared), toyrl from this checkout and its pinned runtime deps:
# sets venv (absolute), pip, constraints and site
# shellcheck source=scripts/conformance/shared_torch.sh
. "$(dirname "$0")/shared_torch.sh"
trainer_environment "$venv" "$repo"

# unsloth and unsloth_zoo, without their declared dependencies (vllm, bitsandbytes, xformers, triton,
# trl, peft, ...: GPU kernels and trainers the loss function never calls).
"${pip[@]}" -c "$constraints" --no-deps "unsloth==$version" "unsloth_zoo==$version"

# what unsloth_zoo's import needs on the CPU backend, pinned as a first install resolved them
"${pip[@]}" -c "$constraints" transformers==5.17.0 datasets==4.8.4 huggingface_hub==1.33.0 \
    tokenizers==0.23.3 safetensors==0.8.0 hf-xet==1.8.0 pyarrow==26.0.1 dill==0.4.1 multiprocess==0.70.19 \
    xxhash==4.1.0 fsspec==2026.2.0 filelock==4.3.2 psutil==7.2.2 PyYAML==6.0.4 regex==2026.12.2 \
    tqdm==4.70.1 packaging==26.4 requests==2.34.2 urllib3==2.8.0 certifi==2026.10.19.post1 \
    charset-normalizer==3.5.3 idna==3.21 httpx==0.29.0 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 \
    aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 \
    multidict==7.2.1 propcache==0.5.4 yarl==1.25.1
