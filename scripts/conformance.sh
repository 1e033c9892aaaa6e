#!/usr/bin/env bash
# The trainer conformance suite: each trainer's own installed code against toyrl's presets.
#
#     bash scripts/conformance.sh [--build-only] [TRAINER[@VERSION] ...]
#                  (default: trl verl openrlhf oat swift unsloth skyrl areal)
#
# Builds each trainer's pinned environment, .trainers/TRAINER (a virtualenv of its own, never a
# dependency of toyrl), with scripts/conformance/TRAINER.sh, once: it is rebuilt when that script
# changes. TRAINER@VERSION (e.g. verl@0.7.0) builds .trainers/TRAINER-VERSION with that release,
# for the scripts that take one (VENV_DIR VERSION), and runs the same tests there: they follow the
# release they find installed (CI runs the default, pinned releases). Then runs tests/conformance/test_TRAINER.py,
# and any tests/conformance/test_TRAINER_*.py (e.g. test_trl_bridge.py), in it with TOYRL_CONFORMANCE=1, so that a
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
    trainers=(trl verl openrlhf oat swift unsloth skyrl areal)
fi

build() {
    local trainer=${1%@*} version="" venv=".trainers/${1%@*}"
    if [ "$1" != "$trainer" ]; then
        version=${1#*@}
        venv=".trainers/$trainer-$version"
    fi
    local script="scripts/conformance/$trainer.sh"
    if [ ! -f "$script" ]; then
        echo "conformance: unknown trainer '$trainer' (valid: $(cd scripts/conformance && ls ./*.sh | sed 's|^./||; s|\.sh$||' | grep -v shared_torch | paste -sd, - | sed 's/,/, /g'))" >&2
        return 2
    fi
    if [ -n "$version" ] && ! grep -q "VERSION" "$script"; then
        echo "conformance: $script builds one release only; '$1' needs a script that takes a version" >&2
        return 2
    fi
    local want
    want=$( (sha256sum "$script" | cut -d' ' -f1; echo "$version") | sha256sum | cut -d' ' -f1)
    if [ -z "$version" ]; then
        want=$(sha256sum "$script" | cut -d' ' -f1)
    fi
    if [ -f "$venv/.built-from" ] && [ "$(cat "$venv/.built-from")" = "$want" ]; then
        return 0
    fi
    echo "conformance: building $venv with $script${version:+ $version}"
    local start=$SECONDS
    rm -rf "$venv"
    bash "$script" "$venv" ${version:+"$version"}
    echo "$want" > "$venv/.built-from"
    echo "conformance: $venv built in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
}

status=0
for trainer in "${trainers[@]}"; do
    build "$trainer" || { status=$?; continue; }
    if [ "$build_only" -eq 0 ]; then
        venv=".trainers/${trainer%@*}"
        if [ "$trainer" != "${trainer%@*}" ]; then
            venv=".trainers/${trainer%@*}-${trainer#*@}"
        fi
        files=("tests/conformance/test_${trainer%@*}.py")
        for extra in tests/conformance/test_"${trainer%@*}"_*.py; do
            if [ -f "$extra" ]; then
                files+=("$extra")
            fi
        done
        # one process (the trainer environments have no pytest-xdist): the project's addopts but -n
        TOYRL_CONFORMANCE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -o addopts="-ra --strict-markers" \
            "${files[@]}" || status=$?
    fi
done
exit "$status"
