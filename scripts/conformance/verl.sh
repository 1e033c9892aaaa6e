#!/usr/bin/env bash
# verl's conformance environment:  bash scripts/conformance/verl.sh VENV_DIR [VERL_VERSION]
#
# A virtualenv (created if missing; re-running is a no-op) holding:
#   1. torch 2.13.0 first and alone (the CPU build on this machine's disk; every later install is
#      held to it, and to every other pin below, by a constraints file);
#   2. toyrl itself (this checkout, on sys.path by a .pth), its runtime deps and the test runner;
#   3. verl (default 0.9.1) with --no-deps, then only what the tested modules import:
#      verl.trainer.ppo.core_algos, verl.workers.utils.losses / padding, verl.utils.tensordict_utils /
#      seqlen_balancing, verl.workers.config (tensordict, omegaconf, codetiming, transformers for
#      verl.utils.torch_functional's tokenizer type, datasets for verl.utils.dataset's RLHFDataset,
#      psutil for verl.workers.reward_manager, whose prime manager imports it, for the DAPO manager);
#   4. a .pth file putting tests/conformance/standins/verl on sys.path: a stand-in for `ray`, which
#      verl's package __init__ imports but the tested functions never call (see its docstring);
#   5. (default build) the wheels of the older releases toyrl models (toyrl/trainers/verl.py RELEASES),
#      downloaded into VENV_DIR/verl-releases, never installed: the tests read each one's
#      configuration and loss code from the wheel (test_each_release_is_its_own_wheel_s).
# No GPU stack (vllm, flash-attn, megatron), no ray, no model weights.
set -euo pipefail

venv=${1:?usage: verl.sh VENV_DIR [VERL_VERSION]}
version=${2:-0.9.1}
repo=$(cd "$(dirname "$0")/../.." && pwd)

# What differs between the verl releases this script knows. verl 0.7.0 requires numpy<2 (so the
# scipy and pandas releases that still take numpy 1; pandas 2 needs pytz) and imports names that
# transformers 5 removed (so transformers 4, huggingface_hub 0.x and the datasets release that takes
# it, with fsspec[http]'s aiohttp and huggingface_hub 0.x's requests).
case "$version" in
    0.9.1)
        versioned="numpy==2.4.6
scipy==1.17.1
pandas==3.1.1
transformers==5.9.0
huggingface_hub==1.33.0
datasets==5.2.0
fsspec==2026.9.0"
        ;;
    0.7.0)
        versioned="numpy==1.26.4
scipy==1.15.3
pandas==2.3.3
pytz==2026.6
transformers==4.57.6
huggingface_hub==0.36.2
datasets==4.8.5
fsspec==2026.2.0
aiohttp==3.14.5
aiohappyeyeballs==2.7.1
aiosignal==1.4.0
attrs==26.1.0
frozenlist==1.8.0
multidict==7.2.1
propcache==0.5.4
yarl==1.25.1
requests==2.34.2
charset-normalizer==3.5.3
urllib3==2.8.0"
        ;;
    *) echo "verl.sh: no pinned environment for verl $version (known: 0.9.1, 0.7.0)" >&2; exit 2 ;;
esac

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
venv=$(cd "$venv" && pwd)
python="$venv/bin/python"

# Every package of the environment, pinned: pip takes nothing else, whatever a requirement allows.
constraints="$venv/conformance-constraints.txt"
cat > "$constraints" <<PINS
torch==2.13.0
$versioned
filelock==4.3.1
Jinja2==3.1.6
MarkupSafe==3.0.4
mpmath==1.3.0
networkx==3.6.1
sympy==1.14.0
typing_extensions==4.16.0
python-dateutil==4.0.0
tzdata==2026.6
matplotlib==3.11.2
contourpy==1.3.3
cycler==0.12.1
fonttools==4.68.0
kiwisolver==1.5.1
pillow==13.0.0
pyparsing==3.3.3
packaging==25.0
typer==0.29.2
annotated-doc==0.0.7
annotated-types==0.8.0
click==8.5.1
markdown-it-py==4.3.0
mdurl==0.1.2
pydantic==2.14.4
pydantic_core==2.50.5
Pygments==2.21.0
rich==15.0.0
shellingham==1.5.4
typing-inspection==0.4.5
joblib==1.6.0
pytest==9.2.0
iniconfig==2.3.1
pluggy==1.7.0
pytest-timeout==2.4.0
verl==$version
tensordict==0.10.0
cloudpickle==3.1.3
importlib_metadata==10.2.0
lazy-importer==0.1.0
orjson==3.13.0
pyvers==0.1.0
zipp==4.1.2
codetiming==1.4.0
omegaconf==2.3.0
antlr4-python3-runtime==4.9.3
PyYAML==6.0.4
hf-xet==1.8.0
httpx==0.28.1
httpcore==1.0.9
h11==0.16.0
anyio==4.16.0
idna==3.20
certifi==2026.10.19.post1
regex==2026.11.19
safetensors==0.8.0
tokenizers==0.22.2
tqdm==4.70.1
dill==0.4.1
multiprocess==0.70.19
pyarrow==26.0.1
xxhash==4.1.0
psutil==7.2.2
PINS
pip=("$python" -m pip install --quiet --disable-pip-version-check --no-compile -c "$constraints")

# shellcheck source=scripts/conformance/shared_torch.sh
. "$(dirname "$0")/shared_torch.sh"
shared_torch "$python"
# toyrl from this checkout, by a .pth onto its source: no build in the tree, which another
# install of the checkout may be using at the same time
site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$repo" > "$site/toyrl-source.pth"
"${pip[@]}" numpy scipy pandas matplotlib typer joblib pytest pytest-timeout
# pip reports verl's other requirements (ray, wandb, peft, ...) as missing: by design
"${pip[@]}" --no-deps "verl==$version"
"${pip[@]}" tensordict codetiming omegaconf transformers datasets packaging psutil

site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$repo/tests/conformance/standins/verl" > "$site/toyrl-conformance-standins.pth"

if [ "$version" = "0.9.1" ]; then
    for release in 0.4.0 0.4.1 0.5.0 0.6.0 0.6.1 0.7.0 0.7.1 0.8.0 0.9.0; do
        "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
            --dest "$venv/verl-releases" "verl==$release"
    done
fi
# the stand-in is the ray that imports, and nothing is installed unpinned
"$python" - "$constraints" "$repo" <<'CHECK'
import importlib.metadata, re, sys

import ray
import verl.trainer.ppo.core_algos  # noqa: F401

assert ray.__file__.startswith(sys.argv[2] + "/tests/"), ray.__file__
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
pins = {norm(line.split("==")[0]): line.split("==")[1] for line in open(sys.argv[1]).read().split() if "==" in line}
for dist in importlib.metadata.distributions():
    name, version = norm(dist.metadata["Name"]), dist.version
    if name in ("pip", "setuptools", "toyrl"):
        continue
    if pins.get(name) != version.split("+")[0]:
        sys.exit(f"verl.sh: {name} {version} is installed but pinned as {pins.get(name)}")
CHECK
