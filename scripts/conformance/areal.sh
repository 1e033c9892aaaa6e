#!/usr/bin/env bash
# AReaL's conformance environment: bash scripts/conformance/areal.sh VENV_DIR
#
# A virtualenv with torch 2.13.0 (the CPU build on disk; AReaL 1.0.4 declares torch < 2.11, and the
# tested functions, tensor arithmetic and autograd only, run the same on 2.13), toyrl (the checkout,
# on sys.path by a .pth) and its runtime deps, areal 1.0.4 (--no-deps: the pure-Python wheel), and
# the pinned set (PINS below, each --no-deps) that importing areal.trainer.ppo.actor loads: AReaL's
# package __init__ imports its whole service layer (areal.infra: controllers, schedulers, the RPC
# and Ray launchers, the OpenAI-compatible proxy, the stats loggers), so ray, transformers, openai,
# wandb, swanlab, trackio, tensorboardX, datasets, numba (areal.utils.seqpack's packing, which the
# mini-batch split calls) and their dependencies are imported at load though the tested functions
# (PPOActor._compute_advantages, grpo_loss_fn, ppo_actor_loss_fn, Normalization,
# split_padded_tensor_dict_into_mb_list) call none but numba. None of them needs a GPU; they are
# installed as released rather than stood in for (a stand-in for each imported name of ray's,
# transformers' and openai's module trees would be larger than the code under test).
# No GPU stack (sglang, vLLM, flash-attn, megatron), no model weights.
# Idempotent: an existing venv is reused and pip skips what is installed already.
set -euo pipefail

venv=${1:?usage: areal.sh VENV_DIR}
version=1.0.4
repo=$(cd "$(dirname "$0")/../.." && pwd)

# the venv, torch's CPU build (shared), toyrl from this checkout and its pinned runtime deps:
# sets venv (absolute), pip, constraints and site
# shellcheck source=scripts/conformance/shared_torch.sh
. "$(dirname "$0")/shared_torch.sh"
trainer_environment "$venv" "$repo"

"${pip[@]}" -c "$constraints" --no-deps "areal==$version"

# what importing areal.trainer.ppo.actor loads, pinned (see the header)
pins="$venv/conformance-areal-pins.txt"
cat > "$pins" <<'PINS'
aiofiles==25.1.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
attrs==26.1.0
blinker==1.9.0
brotli==1.2.1
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.3
colorlog==6.12.0
contourpy==1.3.3
cwevals==0.0.1b1
cycler==0.12.1
datasets==5.2.0
dill==0.4.1
distro==1.9.0
einops==0.8.2
filelock==4.3.2
Flask==3.1.3
fonttools==4.69.1
frozenlist==1.8.0
fsspec==2026.9.0
googleapis-common-protos==1.76.0
gradio_client==2.7.2
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.17.0
httptools==0.9.0
httpx==0.29.0
httpx2==2.17.0
huggingface_hub==2.4.0
hydra-core==1.4.0.dev1
idna==3.21
iniconfig==2.3.1
itsdangerous==2.2.0
Jinja2==3.1.6
jiter==0.19.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
kernels==0.19.1
kiwisolver==1.5.1
lark==1.3.1
llvmlite==0.50.0
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mdurl==0.1.2
mpmath==1.3.0
msgpack==1.2.4
multidict==7.2.1
multiprocess==0.70.19
networkx==3.6.1
numba==0.68.1
nvidia-ml-py==13.615.71
omegaconf==2.4.0.dev2
openai==3.63.0
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
orjson==3.13.0
packaging==26.4
pillow==12.3.0
platformdirs==4.14.9
pluggy==1.7.0
prettytable==3.19.0
propcache==0.5.4
protobuf==6.33.6
psutil==7.2.2
pwinput==1.0.3
pyarrow==26.0.1
pybase64==1.5.1
pydantic==2.14.4
pydantic-settings==2.16.3
pydantic_core==2.50.5
pyecharts==2.1.0
Pygments==2.21.0
pyparsing==3.3.3
pyroaring==1.0.3
python-dateutil==4.0.0
python-dotenv==1.2.4
python-multipart==0.0.34
PyYAML==6.0.4
ray==2.60.0
referencing==0.37.0
regex==2026.12.2
requests==2.34.2
rich==15.0.0
rpds-py==2026.9.1
safetensors==0.8.0
shellingham==1.5.4
simplejson==4.3.0
sniffio==1.3.1
starlette==1.10.0
swanlab==0.10.3
sympy==1.14.0
tabulate==0.10.0
tenacity==9.2.1
tensorboardX==2.6.5
tokenizers==0.23.3
tomlkit==0.15.3
torchdata==0.11.0
tqdm==4.70.1
trackio==0.43.0
transformers==5.25.0
truststore==0.10.5
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
uvicorn==0.55.0
uvloop==0.23.0
wandb==0.31.0
watchdog==7.1.1
watchfiles==1.3.0
wcwidth==0.9.5
websockets==17.4
Werkzeug==3.1.9
wrapt==2.5.2
xxhash==4.1.0
yarl==1.25.1
PINS
"${pip[@]}" -c "$constraints" --no-deps -r "$pins"
"$venv/bin/python" -c "import areal.trainer.ppo.actor"
