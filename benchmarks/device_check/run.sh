#!/usr/bin/env bash
# shellcheck disable=SC2317  # finish (an EXIT trap) and setup_venv (bash -c under timeout) run indirectly
# vlabench device check: one prepared sequence for a bare GPU machine (one NVIDIA H200, Python 3.12, no network),
# within a time budget, that survives a missing piece by recording why and going on.
#
#   bash benchmarks/device_check/run.sh             # GPU: smolvla, pi0, pi05 at bf16 on cuda; needs wheels/ (prepare.sh)
#   bash benchmarks/device_check/run.sh --dry-run   # the same sequence on the CPU with the tiny models, fp32
#   options: --out DIR (default $OUT), --setup-only (GPU mode: install and check the environment, then stop)
#
# Sequence (each step under `timeout`, skipped once the budget is spent, its failure recorded with a reason):
#   setup      venv with --system-site-packages (+ a .pth to the parent environment, which may itself be a venv),
#              the wheels installed offline, vlabench installed from this tree (--no-index --no-build-isolation)
#   base       `vlabench run --backend torch,torch-compile --fuse-denoise-loop`: eager and the compiled phases with
#              the denoise loop replayed as one CUDA graph, in one process (one fp32 reference), NVML energy;
#              if it fails (compilation, capture), eager alone
#   profile    `vlabench profile --kernels` (GPM and kernel SM coverage where the device has them)
#   dpcache    `vlabench run --backend torch --dp-cache "{0,1,2,6,8,9}"`
#   serving    `vlabench run --backend torch --batch B --robots R`: R robots served by one policy through the dynamic
#              batcher after the timed pass (per-robot p50/p99, queueing, mean batch), first model only
#   quant      `vlabench run --backend torch --precision P` for P in int8 fp8 int4 (torchao on CUDA), first model only
#   compile    `vlabench run --backend torch-compile` (without the fused loop)
#   roofline   `vlabench roofline --result R --json` per result (DP-Cache results: their own roofline block)
#   finish     environment.json, results.tar.gz, traces, summary.md (summarize.py), also when interrupted
# Order: every step for the first model (smolvla), then base for the others, the other profiles, DP-Cache, compile,
# the remaining rooflines: each kind of step is tried at least once before the budget runs out.
#
# $OUT receives at most 8 files (the device tool brings back no more): summary.md, log.txt, environment.json,
# results.tar.gz (result, profile and roofline JSON, per-step logs, steps.tsv) and traces.tar.gz (Chrome traces,
# split into traces.tar.gz.partN of at most 15 MiB when larger; cat them back together).
#
# Environment knobs (defaults in brackets; GPU / dry run):
#   DEVICE_CHECK_MODELS            [smolvla pi0 pi05 / smolvla-tiny pi0-tiny pi05-tiny]
#   DEVICE_CHECK_PROFILE_MODELS    [smolvla pi0 / smolvla-tiny pi0-tiny]
#   DEVICE_CHECK_VARIANTS          [eager compile fused dpcache serving quant]
#   DEVICE_CHECK_SERVING           [8 robots, batch 8, 10 s / 4 robots, batch 4, 2 s]: "ROBOTS BATCH SECONDS"
#   DEVICE_CHECK_QUANT_PRECISIONS  [int8 fp8 int4]: the quant step's precisions; one the torch backend does not
#                                  declare on the device (fp8 below compute capability 8.9) is skipped
#   DEVICE_CHECK_ROOFLINE          [all / eager]: roofline --result for every result, the eager ones, one, or none
#   DEVICE_CHECK_BUDGET_S          [450 / 1500]: wall-clock budget of the whole script; steps past it are skipped
#   DEVICE_CHECK_DP_CACHE          [{0,1,2,6,8,9}]
#   DEVICE_CHECK_DRY_COMPILE       [0]: 1 compiles with inductor in the dry run too (minutes on a small CPU)
#   DEVICE_CHECK_FAIL_STEP         step names (comma or space separated) to fail on purpose (tests)
#   DEVICE_CHECK_PYTHON [python3], DEVICE_CHECK_VENV [$TMPDIR/vlabench-device-check-venv], DEVICE_CHECK_WHEELS [wheels/]
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
mode=gpu
setup_only=0
out="${OUT:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) mode=dry ;;
        --setup-only) setup_only=1 ;;
        --out) out="${2:-}"; shift ;;
        --out=*) out="${1#--out=}" ;;
        -h | --help) sed -n '3,/^set -uo/p' "$0" | sed 's/^# \{0,1\}//; /^set -uo/d'; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$out" ]; then
    echo "error: set OUT or pass --out DIR" >&2
    exit 2
fi
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/device_check.XXXXXX")" || exit 2
mkdir -p "$work/results" "$work/profiles" "$work/roofline" "$work/logs" "$work/env"
steps_file="$work/steps.tsv"
log="$out/log.txt"
: >"$log"
: >"$steps_file"
started=$(date +%s)
export COLUMNS=250 NO_COLOR=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export TORCHINDUCTOR_CACHE_DIR="$work/inductor-cache"
tool_python="${DEVICE_CHECK_PYTHON:-python3}"  # runs summarize.py; the venv's python once it exists

if [ "$mode" = gpu ]; then
    models="${DEVICE_CHECK_MODELS:-smolvla pi0 pi05}"
    profile_models="${DEVICE_CHECK_PROFILE_MODELS:-smolvla pi0}"
    device=cuda precision=bf16
    budget="${DEVICE_CHECK_BUDGET_S:-450}"
    roofline_scope="${DEVICE_CHECK_ROOFLINE:-all}"
    iterations=(--warmup 3 --min-iterations 20 --min-duration 2 --max-iterations 200)
    energy_windows=(--energy-window 1 --idle-window 0.5)
    profile_iterations=(--iterations 5 --min-duration 1 --warmup 2)
    roofline_ceilings=--measure-ceilings
    serving="${DEVICE_CHECK_SERVING:-8 8 10}"
else
    models="${DEVICE_CHECK_MODELS:-smolvla-tiny pi0-tiny pi05-tiny}"
    profile_models="${DEVICE_CHECK_PROFILE_MODELS:-smolvla-tiny pi0-tiny}"
    device=cpu precision=fp32
    budget="${DEVICE_CHECK_BUDGET_S:-1500}"
    roofline_scope="${DEVICE_CHECK_ROOFLINE:-eager}"
    iterations=(--warmup 1 --min-iterations 2 --min-duration 0 --max-iterations 3)
    energy_windows=(--energy-window 1 --idle-window 0.1)
    profile_iterations=(--iterations 2 --min-duration 0.1 --warmup 1 --no-measure-ceilings)
    roofline_ceilings=--measure-ceilings  # the generic CPU profile has no datasheet peak
    serving="${DEVICE_CHECK_SERVING:-4 4 2}"
fi
variants=" ${DEVICE_CHECK_VARIANTS:-eager compile fused dpcache serving quant} "
quant_precisions="${DEVICE_CHECK_QUANT_PRECISIONS:-int8 fp8 int4}"
dp_cache="${DEVICE_CHECK_DP_CACHE:-{0,1,2,6,8,9\}}"
fail_steps="${DEVICE_CHECK_FAIL_STEP:-}"
reserve=25    # seconds kept for summary and packing
min_step=20   # a step is not started with less than this left

elapsed() { echo $(($(date +%s) - started)); }
say() { printf '%s\n' "$*" | tee -a "$log"; }
wants() { case "$variants" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

record() {  # name status seconds rc reason
    local reason="${5//$'\t'/ }"
    printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${reason//$'\n'/ }" >>"$steps_file"
}

skip() {  # name reason
    record "$1" skipped 0 - "$2"
    say "[$(elapsed)s] -- $1 skipped: $2"
}

injected() {
    local name
    for name in ${fail_steps//,/ }; do
        [ "$name" = "$1" ] && return 0
    done
    return 1
}

reason_of() {  # the last error line of a log, else its last line
    local line
    line="$(grep -E '(^|[^A-Za-z])([A-Za-z]*Error|error|ERROR)[]:)]' "$1" 2>/dev/null | grep -v -E '^\s*$' | tail -n 1)"
    [ -n "$line" ] || line="$(grep -v -E '^\s*$' "$1" 2>/dev/null | tail -n 1)"
    line="$(printf '%s' "$line" | sed 's/^[[:space:]│|]*//; s/[[:space:]│|]*$//' | cut -c1-300)"
    printf '%s' "${line:-no output}"
}

# run_step NAME TIMEOUT_S CMD... ; $step_stdout, if set, receives the command's stdout (its stderr goes to the log)
# returns 0 (ok), 1 (failed or timed out), 2 (skipped: time budget)
run_step() {
    local name="$1" limit="$2" rc secs reason t0 left logf="$work/logs/$1.log"
    shift 2
    left=$((budget - $(elapsed) - reserve))
    if [ "$left" -lt "$min_step" ]; then
        skip "$name" "time budget: ${left}s left of ${budget}s (needs at least ${min_step}s)"
        return 2
    fi
    [ "$limit" -gt "$left" ] && limit="$left"
    say "[$(elapsed)s] >> $name (timeout ${limit}s): $*"
    t0=$(date +%s)
    if injected "$name"; then
        echo "error: injected failure (DEVICE_CHECK_FAIL_STEP=$name)" >"$logf"
        rc=3
    elif [ -n "${step_stdout:-}" ]; then
        timeout --kill-after=15 "$limit" "$@" >"$step_stdout" 2>"$logf"
        rc=$?
    else
        timeout --kill-after=15 "$limit" "$@" >"$logf" 2>&1
        rc=$?
    fi
    secs=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
        record "$name" ok "$secs" 0 ""
        say "   ok in ${secs}s"
        return 0
    fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        reason="timeout after ${limit}s"
    else
        reason="$(reason_of "$logf")"
    fi
    record "$name" failed "$secs" "$rc" "$reason"
    say "   FAILED (rc $rc, ${secs}s): $reason"
    tail -n 8 "$logf" | sed 's/^/   | /' | tee -a "$log" >/dev/null
    return 1
}

finished=0
finish() {
    [ "$finished" = 1 ] && return
    finished=1
    say "[$(elapsed)s] finishing: environment.json, results.tar.gz, traces, summary.md"
    printf 'mode=%s\nbudget_s=%s\nwall_s=%s\nmodels=%s\nprofile_models=%s\nvariants=%s\ndevice=%s\nprecision=%s\n' \
        "$mode" "$budget" "$(elapsed)" "$models" "$profile_models" "$variants" "$device" "$precision" >>"$work/env/run.txt"
    local py="$tool_python"
    command -v "$py" >/dev/null 2>&1 || py=python3
    "$py" "$here/summarize.py" environment "$work" "$out" >>"$log" 2>&1 || say "environment.json failed"
    "$py" "$here/summarize.py" pack "$work" "$out" >>"$log" 2>&1 || say "packing failed"
    "$py" "$here/summarize.py" summary "$work" "$out" >>"$log" 2>&1 || say "summary.md failed"
    say "[$(elapsed)s] done; files in $out: $(find "$out" -mindepth 1 -maxdepth 1 -printf '%f ')"
    if [ "${DEVICE_CHECK_KEEP_WORK:-0}" = 1 ]; then
        say "work folder kept: $work"
    else
        rm -rf "$work"
    fi
}
trap finish EXIT
trap 'say "interrupted"; exit 130' INT TERM HUP

# ---------------------------------------------------------------------------------------------------- environment
capture_environment() {
    {
        echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "host=$(hostname 2>/dev/null)"
        echo "kernel=$(uname -srm)"
        echo "cpus=$(nproc 2>/dev/null)"
        echo "git_commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
    } >>"$work/env/run.txt"
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout 60 nvidia-smi -q >"$work/env/nvidia-smi.txt" 2>&1 || echo "(nvidia-smi -q failed: rc $?)" >>"$work/env/nvidia-smi.txt"
    else
        echo "nvidia-smi not found" >"$work/env/nvidia-smi.txt"
    fi
    # the same python3 the venv is made from; torch.cuda.get_device_name() fails (and says why) without a GPU
    timeout 120 "${DEVICE_CHECK_PYTHON:-python3}" -c 'import sys, torch
print(sys.version.split()[0], torch.__version__, torch.version.cuda, file=open(sys.argv[1], "w"))
try:
    print(torch.cuda.get_device_name())
except Exception as error:
    print(f"unavailable: {type(error).__name__}: {error}")' "$work/env/python-torch.txt" \
        >"$work/env/cuda-device.txt" 2>&1 || echo "unavailable: the probe failed (rc $?)" >>"$work/env/cuda-device.txt"
}

setup_venv() {  # GPU mode: a venv that sees the system torch, the carried wheels, vlabench from this tree
    local python="${DEVICE_CHECK_PYTHON:-python3}" wheels="${DEVICE_CHECK_WHEELS:-$here/wheels}" parents site
    if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
        echo "error: no wheels in $wheels: run benchmarks/device_check/prepare.sh and carry that folder"
        return 1
    fi
    rm -rf "$venv"
    "$python" -m venv --without-pip --system-site-packages "$venv" || return 1
    # A venv made from a venv sees the base interpreter's site-packages, not its parent's: add the parent's.
    parents="$("$python" -c 'import site; print(repr([p for p in site.getsitepackages()]))')" || return 1
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
    printf 'import site; list(map(site.addsitedir, %s))\n' "$parents" >"$site/_device_check_parent.pth"
    if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
        "$venv/bin/python" -m ensurepip --default-pip || return 1
    fi
    local pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input)
    # --ignore-installed: into the venv even where the parent holds the package (in another version, or one that
    # pip would otherwise try to uninstall there); setuptools first, since building vlabench needs it (>= 69).
    "${pip[@]}" install --no-index --no-deps --no-cache-dir --ignore-installed "$wheels"/*.whl || return 1
    "${pip[@]}" install --no-index --no-deps --no-build-isolation --no-cache-dir --ignore-installed "$repo" || return 1
    "${pip[@]}" check || echo "note: pip check reports the above (versions of packages the image provides)"
    "${pip[@]}" list --format=freeze >"$work/env/pip-freeze.txt" 2>&1
    (cd / && "$venv/bin/python" -c 'import torch, pydantic, plotly, vlabench.cli; print("torch", torch.__version__, "cuda",
torch.cuda.is_available(), "pydantic", pydantic.VERSION)') || return 1
    "$venv/bin/vlabench" --version || return 1
    echo "venv=$venv" >>"$work/env/run.txt"
}

venv="${DEVICE_CHECK_VENV:-${TMPDIR:-/tmp}/vlabench-device-check-venv}"
export here repo work venv
export -f setup_venv

# ------------------------------------------------------------------------------------------------------- sequence
say "vlabench device check ($mode) into $out; budget ${budget}s; models: $models"
capture_environment
if [ "$mode" = gpu ]; then
    if run_step setup 240 bash -c setup_venv; then
        export PATH="$venv/bin:$PATH"
        tool_python="$venv/bin/python"
    else
        say "setup failed: nothing can be measured; see logs/setup.log in results.tar.gz"
        exit 1
    fi
    [ "$setup_only" = 1 ] && exit 0
elif ! command -v vlabench >/dev/null 2>&1; then
    record setup failed 0 1 "vlabench is not on PATH (pip install -e . first)"
    say "error: vlabench is not on PATH"
    exit 1
fi
hash -r
vlabench --version >>"$log" 2>&1

# Energy: NVML on the GPU when it answers (else none, with the reason); the TDP estimate in the dry run.
if [ "$mode" = gpu ]; then
    if "$tool_python" -c 'import pynvml as n; n.nvmlInit(); n.nvmlDeviceGetTotalEnergyConsumption(n.nvmlDeviceGetHandleByIndex(0))' \
        >"$work/logs/probe_nvml.log" 2>&1; then
        energy=(--energy-meter nvml "${energy_windows[@]}")
        echo "energy_meter=nvml" >>"$work/env/run.txt"
    else
        energy=(--energy-meter none)
        skip energy_nvml "NVML energy counter unavailable: $(reason_of "$work/logs/probe_nvml.log")"
        echo "energy_meter=none" >>"$work/env/run.txt"
    fi
else
    energy=(--energy-meter estimated "${energy_windows[@]}")
    echo "energy_meter=estimated (dry run: NVML replaced by the TDP estimate)" >>"$work/env/run.txt"
fi

# Profile options another vlabench version may add (GPM, kernel SM coverage): used when `profile --help` lists them.
profile_flags=()
profile_help="$(vlabench profile --help 2>/dev/null)"
for flag in --kernels --gpm --sm-coverage --kernel-coverage --sm-tracing; do
    if grep -q -E -- "(^|[[:space:]])${flag}([[:space:]]|$)" <<<"$profile_help"; then
        profile_flags+=("$flag")
    fi
done
echo "profile_flags=${profile_flags[*]}" >>"$work/env/run.txt"

common=(--device "$device" --precision "$precision" --seed 0)
timeout_for() {  # step kind, model -> seconds
    local big=1
    case "$2" in *-tiny | smolvla*) big=0 ;; esac
    case "$1" in
        base) [ "$big" = 1 ] && echo 300 || echo 180 ;;
        compile) [ "$big" = 1 ] && echo 240 || echo 150 ;;
        dpcache | quant | serving) [ "$big" = 1 ] && echo 180 || echo 120 ;;
        profile) [ "$big" = 1 ] && echo 240 || echo 150 ;;
        *) echo 120 ;;
    esac
}

step_base() {  # eager and the fused compiled loop in one process: one fp32 reference, two replicas
    local m="$1" backends="" fused=()
    wants eager && backends=torch
    if wants fused; then
        if [ "$mode" = dry ]; then
            skip "run_${m}_fused" "dry run: the fused denoise loop is a CUDA graph (CUDA only)"
        else
            backends="${backends:+$backends,}torch-compile"
            fused=(--fuse-denoise-loop)
        fi
    fi
    [ -n "$backends" ] || return 0
    run_step "run_${m}_base" "$(timeout_for base "$m")" vlabench run --model "$m" "${common[@]}" --backend "$backends" \
        "${fused[@]}" "${iterations[@]}" "${energy[@]}" --out "$work/results/run_${m}_base"
    if [ $? -eq 1 ] && wants eager; then  # e.g. compilation or graph capture failed: keep the eager baseline
        run_step "run_${m}_eager" "$(timeout_for base "$m")" vlabench run --model "$m" "${common[@]}" --backend torch \
            "${iterations[@]}" "${energy[@]}" --out "$work/results/run_${m}_eager"
    fi
}

step_compile() {  # torch.compile without the fused loop
    local m="$1"
    wants compile || return 0
    if [ "$mode" = dry ] && [ "${DEVICE_CHECK_DRY_COMPILE:-0}" != 1 ]; then
        skip "run_${m}_compile" "dry run: inductor's C++ compilation takes minutes on a small CPU (DEVICE_CHECK_DRY_COMPILE=1 runs it)"
        return 0
    fi
    run_step "run_${m}_compile" "$(timeout_for compile "$m")" vlabench run --model "$m" "${common[@]}" \
        --backend torch-compile "${iterations[@]}" "${energy[@]}" --out "$work/results/run_${m}_compile"
}

step_dpcache() {
    local m="$1"
    wants dpcache || return 0
    run_step "run_${m}_dpcache" "$(timeout_for dpcache "$m")" vlabench run --model "$m" "${common[@]}" --backend torch \
        --dp-cache "$dp_cache" "${iterations[@]}" "${energy[@]}" --out "$work/results/run_${m}_dpcache"
}

step_serving() {  # robots served by one policy instance through the dynamic batcher, after the timed pass
    local m="$1" robots batch seconds
    wants serving || return 0
    read -r robots batch seconds <<<"$serving"
    run_step "run_${m}_serving" "$(timeout_for serving "$m")" vlabench run --model "$m" "${common[@]}" --backend torch \
        --robots "$robots" --batch "$batch" --serve-duration "$seconds" "${iterations[@]}" "${energy[@]}" \
        --out "$work/results/run_${m}_serving"
}

step_quant() {  # the torch backend's quantized precisions, each gated against fp32 (torchao on CUDA)
    local m="$1" p declared
    wants quant || return 0
    # from /, so the repository's vlabench/ folder (which lacks backends/, mapped by package-dir) does not shadow
    # the installed package
    declared=" $(cd / && "$tool_python" -c 'import sys, torch; from vlabench.backends.torch.backend import TorchBackend
print(" ".join(TorchBackend().precisions(torch.device(sys.argv[1]))))' "$device" 2>&1 | tail -n 1) "
    for p in $quant_precisions; do
        if [[ "$declared" != *" $p "* ]]; then  # e.g. fp8 below compute capability 8.9, int4 below 8.0
            skip "run_${m}_${p}" "the torch backend does not run $p on this $device (it runs:${declared% })"
            continue
        fi
        run_step "run_${m}_${p}" "$(timeout_for quant "$m")" vlabench run --model "$m" --device "$device" \
            --precision "$p" --seed 0 --backend torch "${iterations[@]}" "${energy[@]}" --out "$work/results/run_${m}_${p}"
    done
}

step_profile() {
    local m="$1"
    run_step "profile_${m}" "$(timeout_for profile "$m")" vlabench profile --model "$m" "${common[@]}" --backend torch \
        "${profile_flags[@]}" "${profile_iterations[@]}" --out "$work/profiles/profile_${m}"
    if [ $? -eq 1 ] && [ "${#profile_flags[@]}" -gt 1 ]; then  # retry without the optional counters
        run_step "profile_${m}_plain" "$(timeout_for profile "$m")" vlabench profile --model "$m" "${common[@]}" \
            --backend torch --kernels "${profile_iterations[@]}" --out "$work/profiles/profile_${m}_plain"
    fi
}

step_rooflines() {  # [model]: `roofline --result` for each result (of that model) not handled yet
    local only="${1:-}" path model precision backend apart stem
    while IFS=$'\t' read -r path model precision backend apart stem; do
        [ -n "$path" ] || continue
        [ -z "$only" ] || [ "$model" = "$only" ] || continue
        grep -q "^roofline_${stem}"$'\t' "$steps_file" && continue
        case "$apart" in
            dpcache) skip "roofline_${stem}" "DP-Cache result: roofline --result assumes every step computed; its own roofline block is used"
                continue ;;
            serving) skip "roofline_${stem}" "served run: the unserved eager result of the model carries the roofline"
                continue ;;
        esac
        case "$roofline_scope" in
            none) continue ;;
            eager) [ "$backend" = torch ] || continue ;;
            one) if [ "$backend" != torch ] || grep -q -E $'^roofline_[^\t]*\tok\t' "$steps_file"; then continue; fi ;;
        esac
        step_stdout="$work/roofline/${stem}.roofline.json" run_step "roofline_${stem}" 120 vlabench roofline \
            --model "$model" --device "$device" --precision "$precision" --result "$path" "$roofline_ceilings" \
            --no-html --json
    done < <("$tool_python" "$here/summarize.py" results "$work/results")
}

in_list() {  # word, list...
    local word="$1" item
    shift
    for item in "$@"; do [ "$item" = "$word" ] && return 0; done
    return 1
}

# Order: every kind of step on the first (smallest) model, so each is tried once even when the budget runs out;
# then the other models' base runs, profiles, DP-Cache and compile runs; the remaining rooflines last.
read -r -a model_list <<<"$models"
read -r -a profile_list <<<"$profile_models"
first="${model_list[0]:-}"
rest=("${model_list[@]:1}")
if [ -n "$first" ]; then
    step_base "$first"
    in_list "$first" "${profile_list[@]}" && step_profile "$first"
    step_dpcache "$first"
    step_serving "$first"
    step_quant "$first"
    step_compile "$first"
    step_rooflines "$first"
fi
for m in "${rest[@]}"; do step_base "$m"; done
for m in "${profile_list[@]}"; do [ "$m" = "$first" ] || step_profile "$m"; done
for m in "${rest[@]}"; do step_dpcache "$m"; done
for m in "${rest[@]}"; do step_compile "$m"; done
step_rooflines
say "[$(elapsed)s] sequence done"
# Success means the sequence ran to its end and measured something; failed steps are in the summary.
grep -q -E $'^run_[^\t]*\tok\t' "$steps_file" || exit 1
exit 0
