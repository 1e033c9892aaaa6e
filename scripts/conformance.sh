#!/usr/bin/env bash
# The trainer conformance suite: each trainer's own installed code against toyrl's presets.
#
#     bash scripts/conformance.sh [--build-only] [TRAINER ...]     (default: trl verl openrlhf oat)
#
# Builds each trainer's pinned environment, .trainers/TRAINER (a virtualenv of its own, never a
# dependency of toyrl), with scripts/conformance/TRAINER.sh, once: it is rebuilt when that script
# changes. Then runs tests/conformance/test_TRAINER.py in it with TOYRL_CONFORMANCE=1, so that a
# trainer that does not import fails instead of skipping; each run ends with its table (trainer,
# version, setting, preset, max relative difference, status). Exits non-zero if any build or test
# fails, or if a test file collects nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0
if [ "${1:-}" = "--build-only" ]; then
    build_only=1
    shift
fi
trainers=("$@")
if [ ${#trainers[@]} -eq 0 ]; then
    trainers=(trl verl openrlhf oat)
fi

build() {
    local trainer=$1 venv=".trainers/$1" script="scripts/conformance/$1.sh"
    if [ ! -f "$script" ]; then
        echo "conformance: unknown trainer '$trainer' (valid: trl, verl, openrlhf, oat)" >&2
        return 2
    fi
    local want
    want=$(sha256sum "$script" | cut -d' ' -f1)
    if [ -f "$venv/.built-from" ] && [ "$(cat "$venv/.built-from")" = "$want" ]; then
        return 0
    fi
    echo "conformance: building $venv with $script"
    local start=$SECONDS
    rm -rf "$venv"
    bash "$script" "$venv"
    echo "$want" > "$venv/.built-from"
    echo "conformance: $venv built in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
}

status=0
for trainer in "${trainers[@]}"; do
    build "$trainer" || { status=$?; continue; }
    if [ "$build_only" -eq 0 ]; then
        TOYRL_CONFORMANCE=1 ".trainers/$trainer/bin/python" -m pytest -q -p no:cacheprovider \
            "tests/conformance/test_$trainer.py" || status=$?
    fi
done
exit "$status"
