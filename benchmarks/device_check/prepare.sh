#!/usr/bin/env bash
# Build, on a machine with access to the package index, the wheels that the bare GPU machine lacks, into
# benchmarks/device_check/wheels/ (git-ignored; pass it to the device tool with `carry`). run.sh installs them
# offline into a venv that sees the machine's own torch.
#
# Target: Python 3.12, manylinux x86_64, with CUDA torch, Triton, nvidia-ml-py, onnxruntime, pandas, rich, typer,
# jinja2, PyYAML and safetensors already installed, but no pydantic or plotly. Versions: constraints.txt where it
# pins the package, else the version installed in the Python that runs this script, else the newest.
#
# Usage: bash benchmarks/device_check/prepare.sh [WHEEL_DIR]
# Env:   PYTHON (default python3), DEVICE_CHECK_PY_VERSION (default 3.12), DEVICE_CHECK_MAX_MB (default 40)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="${1:-$here/wheels}"
python="${PYTHON:-python3}"
py_version="${DEVICE_CHECK_PY_VERSION:-3.12}"
max_mb="${DEVICE_CHECK_MAX_MB:-40}"

# What the target lacks (pydantic and plotly with their own needs), plus small pure-Python packages whose version
# there is unknown and that vlabench's code relies on: typer's CLI API, typing_extensions for pydantic-core,
# setuptools (>= 69, pyproject.toml's build requirement) to install vlabench itself offline; torchao for the quant
# step's int8, fp8 and int4 (constraints.txt's version; its own CUDA extensions may not load with the machine's
# torch, but these three configs call torch's kernels: the int8 matmul, _weight_int4pack_mm, _scaled_mm).
packages=(
    pydantic pydantic-core annotated-types typing-inspection typing-extensions
    plotly narwhals packaging
    typer annotated-doc shellingham
    setuptools
    torchao
)

pinned_version() {  # constraints.txt, else the version installed here, else nothing (newest)
    local name="$1" pin
    pin="$(grep -i -E "^${name//-/[-_]}==" "$repo/constraints.txt" 2>/dev/null | head -n 1 | cut -d= -f3)"
    if [ -n "$pin" ]; then
        echo "$pin"
        return
    fi
    "$python" -c 'import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass' "$name"
}

mkdir -p "$dest"
rm -f "$dest"/*.whl
failed=0
for name in "${packages[@]}"; do
    version="$(pinned_version "$name")"
    spec="$name${version:+==$version}"
    # pyproject.toml's build requirement is a floor the local version may be under (setuptools 65 on Python 3.11)
    if [ "$name" = setuptools ] && ! "$python" -c 'import sys; v = sys.argv[1].split(".")[0]
sys.exit(0 if v.isdigit() and int(v) >= 69 else 1)' "${version:-0}"; then
        spec="setuptools>=69"
    fi
    echo "== $spec"
    if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: \
        --python-version "$py_version" --implementation cp --abi "cp${py_version/./}" --abi abi3 --abi none \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
        -d "$dest" "$spec"; then
        echo "error: could not download $spec" >&2
        failed=1
    fi
done

# Every Requires-Dist of every wheel (for Python $py_version on Linux) must be met by a wheel here or by a package
# the target already has.
if ! "$python" "$here/check_wheels.py" "$dest" --python-version "$py_version"; then
    failed=1
fi

bytes="$(du -sb "$dest" | cut -f1)"
mb="$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')"
count="$(find "$dest" -name '*.whl' | wc -l)"
echo "wheels: $count in $dest, $mb MiB (limit $max_mb MiB)"
if [ "$bytes" -gt $((max_mb * 1048576)) ]; then
    echo "error: $dest is over $max_mb MiB" >&2
    failed=1
fi
dest_abs="$(cd "$dest" && pwd)"
if [ "${dest_abs#"$repo"/}" != "$dest_abs" ] && git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1 \
    && ! git -C "$repo" check-ignore -q "$dest_abs"; then
    echo "warning: $dest is not ignored by git; it must travel with carry, not as a tracked file" >&2
fi
exit "$failed"
