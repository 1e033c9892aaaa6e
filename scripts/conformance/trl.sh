#!/usr/bin/env bash
# TRL's conformance environment: bash scripts/conformance/trl.sh VENV_DIR [TRL_VERSION]
#
# A virtualenv with torch 2.13.0 (the CPU build on disk), toyrl (the checkout, on sys.path by a .pth) and its
# runtime deps, and TRL (default 1.16.0) with its declared dependencies (transformers,
# accelerate, datasets, ...), every one pinned to the versions a first install resolved. The
# tests build a tiny random LlamaForCausalLM in-process: nothing downloads model weights.
# With the default release, the wheels of the older releases toyrl models are downloaded (not installed)
# into VENV_DIR/trl-releases. TRL_VERSION 0.22.1 builds the release whose scale_rewards is swapped (its own pins), e.g.
#     bash scripts/conformance/trl.sh .trainers/trl-0.22.1 0.22.1
# Idempotent: an existing venv is reused and pip skips what is installed already. No stand-ins.
set -euo pipefail

venv=${1:?usage: trl.sh VENV_DIR [TRL_VERSION]}
version=${2:-1.16.0}
repo=$(cd "$(dirname "$0")/../.." && pwd)

# TRL and its dependencies, as resolved by `pip install trl==VERSION` (pip freeze), pinned.
case "$version" in
1.16.0)
    trl_requirements=(
        trl==1.16.0 transformers==5.24.0 accelerate==1.15.0 datasets==5.2.0 huggingface_hub==2.4.0
        tokenizers==0.23.3 safetensors==0.8.0 hf-xet==1.8.0 pyarrow==26.0.1 dill==0.4.1 multiprocess==0.70.19
        xxhash==4.1.0 fsspec==2026.9.0 filelock==4.3.1 psutil==7.2.2 PyYAML==6.0.4 regex==2026.11.19
        tqdm==4.70.1 Jinja2==3.1.6 MarkupSafe==3.0.4 packaging==26.4 httpx2==2.16.2 httpcore2==2.16.2
        h11==0.16.0 anyio==4.16.0 idna==3.20 truststore==0.10.5 typer==0.29.2 click==8.5.1 rich==15.0.0
        markdown-it-py==4.3.0 mdurl==0.1.2 Pygments==2.21.0 shellingham==1.5.4 annotated-doc==0.0.7
        typing_extensions==4.16.0
    )
    ;;
0.22.1)
    # the release whose scale_rewards is swapped ('batch' and 'none' divide by the group's std,
    # 'group' by nothing): tests/conformance/test_trl.py's test_trl_0_22_scale_rewards
    trl_requirements=(
        trl==0.22.1 transformers==4.56.2 accelerate==1.10.1 datasets==4.1.1 huggingface_hub==0.36.2
        tokenizers==0.22.2 safetensors==0.8.0 hf-xet==1.8.0 pyarrow==26.0.1 dill==0.4.0 multiprocess==0.70.16
        xxhash==4.1.0 fsspec==2025.9.0 filelock==4.3.1 psutil==7.2.2 PyYAML==6.0.4 regex==2026.11.19
        tqdm==4.70.1 Jinja2==3.1.6 MarkupSafe==3.0.4 packaging==26.4 requests==2.34.2 urllib3==2.8.0
        certifi==2026.10.19.post1 charset-normalizer==3.5.3 idna==3.20 aiohttp==3.14.5 aiohappyeyeballs==2.7.1
        aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1
        typing_extensions==4.16.0
    )
    ;;
*)
    echo "trl.sh: no pinned dependency list for trl $version (known: 1.16.0, 0.22.1)" >&2
    exit 2
    ;;
esac

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
venv=$(cd "$venv" && pwd)
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile)

# torch first and alone: the CPU build on disk. Every later install keeps it (constraints).
# shellcheck source=scripts/conformance/shared_torch.sh
. "$(dirname "$0")/shared_torch.sh"
shared_torch "$venv/bin/python"
constraints="$venv/conformance-constraints.txt"
echo "torch==2.13.0" > "$constraints"

# toyrl itself and its runtime deps, plus the test runner.
# toyrl from this checkout, by a .pth onto its source: no build in the tree, which another
# install of the checkout may be using at the same time
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$repo" > "$site/toyrl-source.pth"
"${pip[@]}" -c "$constraints" numpy==2.4.6 scipy==1.17.1 pandas==3.1.1 matplotlib==3.11.2 typer==0.29.2 \
    joblib==1.6.0 pytest==9.2.0 pytest-timeout==2.4.0 \
    contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1 pillow==13.0.0 pyparsing==3.3.3 \
    python-dateutil==4.0.0 tzdata==2026.6 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 cloudpickle==3.1.3 iniconfig==2.3.1 pluggy==1.7.0

# TRL and its dependencies (the list chosen above).
"${pip[@]}" -c "$constraints" "${trl_requirements[@]}"

# The wheels of the older releases toyrl models (toyrl/trainers/trl.py), never installed: the tests
# read each one's trl/trainer/grpo_config.py from the wheel with `ast` (test_each_release_s_defaults).
if [ "$version" = "1.16.0" ]; then
    for release in 0.14.0 0.15.2 0.16.1 0.17.0 0.18.0 0.19.1 0.21.0 0.22.0 0.22.1 0.22.2 0.25.1 0.26.2 \
        0.27.2 0.29.1 1.7.1 1.8.0 1.9.0 1.9.2; do
        "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
            --dest "$venv/trl-releases" "trl==$release"
    done
fi
