# Sourced by the trainer scripts: `shared_torch VENV_PYTHON` puts torch 2.13.0 (the CPU build on
# this machine's disk) into the environment of VENV_PYTHON without a copy of its own. The wheel is
# unpacked once, into .trainers/_torch-2.13.0 (under a lock, so environments built at the same time
# wait for the one that unpacks it), and each environment reads it through a .pth file; pip then
# sees torch installed there and installs only its small dependencies into the environment. Four
# environments share one 800 MB unpacking instead of making four.
shared_torch() {
    local python=$1 repo shared site
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    shared="$repo/.trainers/_torch-2.13.0"
    mkdir -p "$repo/.trainers"
    (
        flock 9
        if [ ! -f "$shared/.complete" ]; then
            rm -rf "$shared"
            "$python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps --target "$shared" \
                torch==2.13.0
            touch "$shared/.complete"
        fi
    ) 9> "$repo/.trainers/.torch.lock"
    site=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    echo "$shared" > "$site/shared-torch.pth"
    "$python" -m pip install --quiet --disable-pip-version-check --no-compile torch==2.13.0
    "$python" -c "import torch, sys; assert torch.__version__ == '2.13.0+cpu', torch.__version__" \
        || { echo "shared_torch: torch 2.13.0+cpu does not import in $python" >&2; return 1; }
}
