#!/usr/bin/env bash
# ms-swift's conformance environment: bash scripts/conformance/swift.sh VENV_DIR
#
# A virtualenv with torch 2.13.0 (the CPU build on disk), toyrl (the checkout, on sys.path by a .pth) and its
# runtime deps, ms-swift 4.6.0 (--no-deps) and the modules that the tested code's imports need:
# swift/rl_core/advantage.py (`compute_advantages`, pure torch) and swift/rlhf_trainers/grpo_trainer.py
# (`GRPOTrainer._compute_loss_and_metrics`, called on a trainer instance made without its __init__),
# whose import chain is transformers, trl, accelerate, peft, datasets and modelscope, each pinned.
# No stand-ins: everything imported is the real package (nothing here needs a GPU at import).
# Idempotent: an existing venv is reused and pip skips what is installed already.
set -euo pipefail

venv=${1:?usage: swift.sh VENV_DIR}
version=4.6.0
repo=$(cd "$(dirname "$0")/../.." && pwd)

# the venv, torch's CPU build (shared), toyrl from this checkout and its pinned runtime deps:
# sets venv (absolute), pip, constraints and site
# shellcheck source=scripts/conformance/shared_torch.sh
. "$(dirname "$0")/shared_torch.sh"
trainer_environment "$venv" "$repo"

# ms-swift itself, without its declared dependencies (a web UI, evaluation, inference servers,
# tokenizers of other models: none of them imported by the tested modules).
"${pip[@]}" -c "$constraints" --no-deps "ms-swift==$version"

# What `import swift.rl_core.advantage, swift.rlhf_trainers.grpo_trainer` needs (found by importing
# them in an environment of ms-swift alone), with their own dependencies, pinned as a first install
# resolved them: trl < 1.0 (ms-swift 4.6.0 declares trl >= 0.15, < 1.0; its GRPOConfig needs >= 0.26)
# and transformers < 5.20, accelerate, datasets < 4.8.5, peft < 0.21, modelscope, and the small
# pure-Python modules swift/utils and swift/template import (json_repair, einops, dacite, msgspec).
"${pip[@]}" -c "$constraints" trl==0.29.1 transformers==5.19.0 accelerate==1.16.0 datasets==4.8.4 \
    peft==0.20.0 modelscope==1.40.2 modelscope-hub==0.5.1 json_repair==0.64.6 einops==0.8.2 dacite==1.9.2 \
    msgspec==0.23.0 huggingface_hub==1.33.0 tokenizers==0.23.3 safetensors==0.8.0 hf-xet==1.8.0 \
    pyarrow==26.0.1 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 fsspec==2026.2.0 filelock==4.3.2 \
    psutil==7.2.2 PyYAML==6.0.4 regex==2026.12.2 tqdm==4.70.1 packaging==26.4 requests==2.34.2 \
    urllib3==2.8.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3 idna==3.21 httpx==0.29.0 \
    httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 \
    attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1 cryptography==51.0.1 \
    cffi==2.1.1 pycparser==3.12 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 cloudpickle==3.1.3
