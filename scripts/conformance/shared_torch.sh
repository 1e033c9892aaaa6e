# Sourced by the trainer scripts. `shared_torch VENV_PYTHON` puts torch 2.13.0 (the CPU build on
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

# Sourced by the trainer scripts: `trainer_environment VENV_DIR REPO` makes (or reuses) the
# virtualenv VENV_DIR with torch 2.13.0's CPU build (`shared_torch`), toyrl from the checkout REPO
# on sys.path by a .pth (no build in the tree, which another install of the checkout may be using
# at the same time) and toyrl's runtime dependencies and test runner, pinned; then sets, for the
# script's own installs, `venv` (its absolute path), `pip` (the install command, an array),
# `constraints` (a file keeping torch at 2.13.0: pass it with -c) and `site` (its site-packages).
trainer_environment() {
    venv=$1
    local repo=$2
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    venv=$(cd "$venv" && pwd)
    pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile)
    # torch first and alone: the CPU build on disk. Every later install keeps it (constraints).
    shared_torch "$venv/bin/python"
    constraints="$venv/conformance-constraints.txt"
    echo "torch==2.13.0" > "$constraints"
    site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    echo "$repo" > "$site/toyrl-source.pth"
    "${pip[@]}" -c "$constraints" numpy==2.4.6 scipy==1.17.1 pandas==3.1.1 matplotlib==3.11.2 typer==0.29.2 \
        joblib==1.6.0 pytest==9.2.0 pytest-timeout==2.4.0
}
