"""``benchmarks/device_check/``: the dry run of the GPU device check (the same sequence on the CPU with the tiny
models) survives a failing step, records why, and leaves at most 8 well-named files in $OUT; the packing splits and
trims traces to what the device tool brings back; the wheel checker catches unmet requirements."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from vlabench.results.schema import load_result

HERE = ROOT / "benchmarks" / "device_check"
RUN = HERE / "run.sh"
TINY = ("smolvla-tiny", "pi0-tiny", "pi05-tiny")
NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"device_check_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One dry run, kept lean for two cores: no DP-Cache pass, one quantized precision, one profile, one roofline, one
    served run (4 robots for 2 s); the eager+compile step of smolvla-tiny fails on purpose, so its eager-only retry
    must run."""
    out = tmp_path_factory.mktemp("out")
    env = {
        **os.environ,
        "OUT": str(out),
        "TMPDIR": str(tmp_path_factory.mktemp("work")),
        "DEVICE_CHECK_VARIANTS": "eager compile fused serving quant",
        "DEVICE_CHECK_QUANT_PRECISIONS": "fp8 int3",  # int3: a precision the backend does not declare
        "DEVICE_CHECK_PROFILE_MODELS": "pi0-tiny",
        "DEVICE_CHECK_ROOFLINE": "one",
        "DEVICE_CHECK_FAIL_STEP": "run_smolvla-tiny_base",
        # one intra-op thread per vlabench child, as in-process tests run (tests/conftest.py): two threads on two
        # cores that the other test worker also uses oversubscribe them and make every timed step crawl
        "OMP_NUM_THREADS": "1",
    }
    completed = subprocess.run(
        ["bash", str(RUN), "--dry-run"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    return completed, out


def test_dry_run_exits_0_with_at_most_8_files_the_device_tool_brings_back(dry_run):
    completed, out = dry_run
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    files = list(out.iterdir())
    assert 4 <= len(files) <= 8
    assert all(path.is_file() and NAME.match(path.name) for path in files), files
    assert all(path.stat().st_size <= 16 * 1024 * 1024 for path in files)
    assert {"summary.md", "log.txt", "environment.json", "results.tar.gz", "traces.tar.gz"} <= {p.name for p in files}
    environment = json.loads((out / "environment.json").read_text())
    assert environment["run"]["mode"] == "dry" and environment["cuda_device_name"] is None


def test_dry_run_archive_holds_a_valid_result_per_tiny_model_a_profile_and_a_roofline(dry_run, tmp_path):
    _, out = dry_run
    with tarfile.open(out / "results.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    results = [load_result(path) for path in (tmp_path / "results").rglob("*.json")]
    for model in TINY:
        assert any(r.model.name == model and r.valid and r.precision == "fp32" for r in results), model
    served = [r for r in results if r.serving is not None]  # the serving step: the first model only
    assert [(r.model.name, r.serving.robots, r.serving.max_batch) for r in served] == [("smolvla-tiny", 4, 4)]
    assert served[0].valid and served[0].serving.requests > 0
    quantized = [r for r in results if r.precision != "fp32"]  # the quant step: the first model only
    assert [(r.model.name, r.precision, r.backend) for r in quantized] == [("smolvla-tiny", "fp8", "torch")]
    assert quantized[0].correctness.passed and quantized[0].valid
    assert all(r.energy is not None and r.energy.label == "estimated" for r in results)
    profiles = [json.loads(p.read_text()) for p in (tmp_path / "profiles").rglob("*.profile.json")]
    assert [p["model"] for p in profiles] == ["pi0-tiny"]
    assert not list(tmp_path.rglob("*.trace.json")), "traces travel in traces.tar.gz, not in the results"
    rooflines = [json.loads(p.read_text()) for p in (tmp_path / "roofline").glob("*.roofline.json")]
    assert len(rooflines) == 1 and rooflines[0]["report"]["phases"]
    with tarfile.open(out / "traces.tar.gz") as archive:
        assert any(name.endswith(".trace.json") for name in archive.getnames())


def test_dry_run_records_the_failed_step_and_the_skipped_variants_with_reasons_and_goes_on(dry_run):
    _, out = dry_run
    summary = (out / "summary.md").read_text()
    steps = {row[0]: row[1:] for row in _step_rows(summary)}
    assert steps["run_smolvla-tiny_base"][0] == "failed"
    assert "injected failure" in steps["run_smolvla-tiny_base"][2]
    assert steps["run_smolvla-tiny_eager"][0] == "ok"  # the eager-only retry
    for model in TINY:
        assert model in summary
        assert steps[f"run_{model}_fused"][0] == "skipped" and "CUDA" in steps[f"run_{model}_fused"][2]
        assert steps[f"run_{model}_compile"][0] == "skipped" and steps[f"run_{model}_compile"][2]
    assert steps["profile_pi0-tiny"][0] == "ok"
    assert steps["run_smolvla-tiny_fp8"][0] == "ok" and "| smolvla-tiny | eager fp8 |" in summary
    assert steps["run_smolvla-tiny_int3"][0] == "skipped" and "does not run int3" in steps["run_smolvla-tiny_int3"][2]
    assert "int8 fp8 int4" in steps["run_smolvla-tiny_int3"][2]  # what it does run, from the backend itself
    assert "| pi0-tiny | eager |" in summary
    assert steps["run_smolvla-tiny_serving"][0] == "ok"
    assert "| smolvla-tiny | eager + 4 robots served (batch ≤ 4) |" in summary
    served_rows = summary.split("## Robots served", 1)[1].split("##", 1)[0]
    assert "| smolvla-tiny | 4 | 4 |" in served_rows
    roofline_skips = [row for name, *row in _step_rows(summary) if name.startswith("roofline_") and "served" in row[2]]
    assert roofline_skips and roofline_skips[0][0] == "skipped"
    assert "GPM: no (not a CUDA device)" in summary
    assert "injected failure" in (out / "log.txt").read_text()


def _step_rows(summary: str) -> list[list[str]]:
    section = summary.split("## Steps", 1)[1].split("##", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in section.splitlines()]
    return [row for row in rows if len(row) == 4 and row[0] not in ("step", "---")]


def test_run_sh_needs_an_output_folder_and_both_scripts_parse():
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    completed = subprocess.run(["bash", str(RUN), "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 2 and "OUT" in completed.stderr
    for script in ("run.sh", "prepare.sh"):
        assert subprocess.run(["bash", "-n", str(HERE / script)], timeout=60).returncode == 0
    assert "/benchmarks/device_check/wheels/" in (ROOT / ".gitignore").read_text().splitlines()


def test_pack_splits_traces_into_parts_and_leaves_out_the_largest_past_the_limit(tmp_path, monkeypatch):
    summarize = load("summarize")
    monkeypatch.setattr(summarize, "PART_BYTES", 1 << 20)
    monkeypatch.setattr(summarize, "MAX_TRACE_BYTES", 3 << 20)
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    for name, size in (("small", 1 << 19), ("medium", 2 << 20), ("large", 4 << 20)):
        folder = work / "profiles" / f"profile_{name}"
        folder.mkdir(parents=True)
        (folder / f"{name}.trace.json").write_bytes(os.urandom(size))  # incompressible
        (folder / f"{name}.profile.json").write_text(json.dumps({"kind": "profile", "model": name}))
    manifest = summarize.pack(work, out)
    assert manifest["traces_left_out"] == ["profiles/profile_large/large.trace.json"]
    assert manifest["trace_files"] == ["traces.tar.gz.part0", "traces.tar.gz.part1", "traces.tar.gz.part2"]
    joined = tmp_path / "joined.tar.gz"
    joined.write_bytes(b"".join((out / name).read_bytes() for name in manifest["trace_files"]))
    with tarfile.open(joined) as archive:
        assert sorted(archive.getnames()) == sorted(manifest["traces"])
    with tarfile.open(out / "results.tar.gz") as archive:
        assert len([n for n in archive.getnames() if n.endswith(".profile.json")]) == 3


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {line}\n" for line in requires
    )
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", metadata)


def test_check_wheels_flags_unmet_and_mismatched_requirements_but_not_extras_or_other_pythons(tmp_path):
    check_wheels = load("check_wheels")
    _wheel(tmp_path, "alpha", "1.0", ["beta==2.0", "torch>=2", "gamma; extra == 'dev'", "delta; python_version<'3'"])
    _wheel(tmp_path, "beta", "2.0", [])
    assert check_wheels.check(tmp_path, "3.12") == []
    _wheel(tmp_path, "epsilon", "1.0", ["beta>=3", "zeta"])
    problems = check_wheels.check(tmp_path, "3.12")
    assert len(problems) == 2 and "beta>=3" in problems[0] and "zeta" in problems[1]
