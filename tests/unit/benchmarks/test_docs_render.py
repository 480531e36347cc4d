"""The numbers in README.md and docs/ are rendered from committed artifacts, never typed by hand.

``benchmarks/render_docs.py`` replaces every ``<!-- BEGIN generated: NAME -->`` block from the JSON artifacts in
``benchmarks/results/``; these tests re-render and compare, check that tampering is caught, that every block has
its artifact and provenance sidecar, that no measurement-like number sits outside a generated block, and that the
README's links and quickstart hold.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT


def _load_render_docs():
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "benchmarks" / "render_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


render_docs = _load_render_docs()

QUICKSTART = (
    "python3 -m pip install -c constraints.txt -e . && vlabench run --model smolvla",
    "python3 -m pip install -c constraints.txt -e '.[test]' && python3 -m pytest",
)

# A number with a unit of measurement (ms, J, W, %, ×, Hz, GB/s, FLOP/s); "8 × 7" is a shape, not a speed-up.
MEASUREMENT = re.compile(
    r"(?<![\w.\-/{])[±≈~]?\d[\d,]*(?:\.\d+)?\s?(?:ms|kJ|J|W|%|×(?!\s*\d)|Hz|GB/s|[GT]FLOP/s)(?!\w)"
)
# Configuration values and thresholds that may be written in prose, each with what it is.
ALLOWED = {
    "5%": "coefficient-of-variation warning threshold (NOISY_COV)",
    "15%": "memory headroom added to the footprint estimate (HEADROOM)",
    "25%": "background CPU load warning threshold (BUSY_BACKGROUND_PERCENT)",
    "30%": "assumed idle share of TDP for the estimated meter (ASSUMED_IDLE_SHARE)",
    "50%": "default duty cycle of the cost model",
    "1%": "tolerance of the test comparing traced and analytic FLOPs",
    "6 W": "assumed watts per physical core for the estimated meter",
    "5 ms": "default --max-wait-ms of the dynamic batcher (RunConfig.max_wait_ms)",
    "20 ms": "NVML counter sampling period",
    "50 ms": "psutil sampling period; GEMM growth stop of the ceiling probe",
    "100 ms": "polling period of the NVML, INA3221 and tegrastats meters",
    "4.5×": "issue 19's target speed-up over eager fp32 on AMX CPUs (benchmarks/backends.py checks it)",
    "2×": "issue 19's target speed-up over eager fp32 on CPUs without native bf16",
    "60%": "issue 19's target share of the action expert's roofline floor",
    "95%": "confidence of a percentile's interval (measure.stats.CONFIDENCE)",
    "2.5%": "each tail of the 95% interval",
    "97.5%": "the one-sided confidence of the interval's upper end",
    "2%": "relative tolerance of the relations between a result's figures (results.relations.RELATIVE)",
    "0.5 ms": "timer granularity per sum in those relations (results.relations.ABSOLUTE_MS)",
    "10 ms": "the action loop's allowed overhead over its steps (results.relations)",
    "10%": "drift of each observation towards the next in vlabench fidelity's open loop; memory margin of the "
    "relations (results.relations.MEMORY_MARGIN)",
}


def copy_tree(destination: Path) -> Path:
    """README.md, docs/ and the artifacts: everything the render reads and writes."""
    shutil.copy(ROOT / "README.md", destination / "README.md")
    shutil.copytree(ROOT / "docs", destination / "docs")
    shutil.copytree(ROOT / "benchmarks" / "results", destination / "benchmarks" / "results")
    return destination


def test_generated_blocks_match_a_fresh_render_of_the_artifacts():
    diffs = render_docs.check(ROOT)
    assert not diffs, "".join(diffs) + "\nrun: python3 benchmarks/render_docs.py"


def test_the_check_command_passes(capsys):
    assert render_docs.main(["--check"]) == 0, capsys.readouterr().out


def test_a_number_changed_inside_a_generated_block_fails_the_check(tmp_path):
    root = copy_tree(tmp_path)
    readme = root / "README.md"
    text = readme.read_text()
    block = next(m for m in render_docs.BLOCK.finditer(text) if m.group("name") == "quickstart")
    digit = re.search(r"\d", block.group("body"))
    position = block.start("body") + digit.start()
    tampered = text[:position] + str((int(text[position]) + 1) % 10) + text[position + 1 :]
    readme.write_text(tampered)
    diffs = render_docs.check(root)
    assert len(diffs) == 1 and "README.md" in diffs[0]
    assert render_docs.main(["--check", "--root", str(root)]) == 1
    render_docs.main(["--root", str(root)])  # the render restores it
    assert readme.read_text() == text


def test_a_changed_artifact_fails_the_check(tmp_path):
    root = copy_tree(tmp_path)
    path = root / "benchmarks" / "results" / "models.json"
    models = json.loads(path.read_text())
    models[0]["params"] += 1_000_000
    path.write_text(json.dumps(models))
    assert render_docs.check(root)


def test_every_generated_block_has_a_renderer_and_committed_artifacts():
    used = set()
    for document in render_docs.documents(ROOT):
        text = document.read_text()
        render_docs.check_markers(text, document.name)
        for name in render_docs.block_names(text):
            used.add(name)
            assert name in render_docs.BLOCKS, f"{document.name}: no renderer for block {name}"
            for artifact in render_docs.BLOCKS[name].artifacts:
                path = ROOT / artifact
                assert path.is_file(), f"{document.name}: block {name} needs {artifact}"
                meta = json.loads(render_docs.meta_path(path).read_text())
                for key in ("command", "capture_command", "started_utc", "git_revision", "cpu", "load_average_before"):
                    assert meta.get(key) is not None, f"{artifact}: provenance sidecar lacks {key}"
                assert meta["exit_code"] == 0
    assert used == set(render_docs.BLOCKS), f"renderers without a block: {set(render_docs.BLOCKS) - used}"


def test_an_unknown_or_unbalanced_block_is_refused():
    with pytest.raises(render_docs.RenderError, match="no renderer"):
        render_docs.render_text("<!-- BEGIN generated: nope -->\n<!-- END generated: nope -->\n", ROOT)
    with pytest.raises(render_docs.RenderError, match="no END"):
        render_docs.render_text("<!-- BEGIN generated: models -->\ntext\n", ROOT)


def test_no_measurement_is_typed_outside_the_generated_blocks():
    found = []
    for document in render_docs.documents(ROOT):
        prose = render_docs.BLOCK.sub("", document.read_text())
        for line in prose.splitlines():
            for number in (m.group(0) for m in MEASUREMENT.finditer(line)):
                if number not in ALLOWED:
                    found.append(f"{document.relative_to(ROOT)}: {number!r} in: {line.strip()}")
    assert not found, "numbers that look measured belong in a generated block:\n" + "\n".join(found)


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_relative_links_and_anchors_resolve():
    broken = []
    for document in [*render_docs.documents(ROOT), ROOT / "ARCHITECTURE.md"]:
        for target in re.findall(r"\]\(([^)\s]+)\)", document.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (document.parent / path).resolve() if path else document
            if not linked.exists():
                broken.append(f"{document.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text()):
                broken.append(f"{document.name}: {target} (no such heading)")
    assert not broken, broken


def test_readme_is_short_and_keeps_the_two_quickstart_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for command in QUICKSTART:
        assert f"```bash\n{command}\n```" in readme
    assert QUICKSTART[1] in (ROOT / ".ci" / "run").read_text().replace("install -q ", "install ")
    for heading in ("## Quickstart", "## How it works", "## Which hardware should I buy?", "## Exit codes"):
        assert heading in readme
    for code in ("0", "1", "2", "3", "4", "5", "6", "7", "130"):
        assert re.search(rf"^\| {code} \|", readme, re.M), f"exit code {code} missing"


def test_readme_gives_a_cpu_only_a_cuda_and_a_jetson_install_line_and_what_each_downloads():
    readme = (ROOT / "README.md").read_text()
    cpu = next(line for line in readme.splitlines() if "CPU only" in line)
    assert "--index-url https://download.pytorch.org/whl/cpu" in cpu and "torch-2.13.0+cpu" in cpu
    cuda = next(line for line in readme.splitlines() if "NVIDIA GPU" in line and line.startswith("|"))
    assert "no `-c constraints.txt`" in cuda and "CUDA build" in cuda and "several GB" in cuda
    jetson = next(line for line in readme.splitlines() if line.startswith("| Jetson"))
    assert "JetPack torch wheel" in jetson and "without the constraints file" in jetson
    assert "the CPU build" not in readme.split("## Quickstart")[1].split("|")[0]


def test_the_backends_table_names_the_ceilings_every_floor_rests_on():
    ceilings = [
        {"quantity": "gemm_int8", "value": 0.689, "unit": "TOP/s"},
        {"quantity": "gemm_bf16", "value": 0.3487, "unit": "TFLOP/s"},
        {"quantity": "memory_bandwidth", "value": 20.74, "unit": "GB/s"},
    ]
    sentence = render_docs.measured_once(ceilings)
    assert "memory bandwidth 20.7 GB/s" in sentence and "int8 0.69 TOP/s, bf16 0.35 TFLOP/s" in sentence
    assert render_docs.measured_once(None) == render_docs.measured_once([]) == ""  # artifacts from before


def test_a_share_above_the_floor_is_marked_as_a_low_ceiling_reading():
    """The committed Zen 4 run read its fp32 GEMM ceiling low: its fp32 runtimes show more than 100% of their floor,
    and exactly the rows above 100% in the artifact are marked."""
    artifact = "benchmarks/results/backends-smolvla-avx512-bf16-cpu.json"
    records = json.loads((ROOT / artifact).read_text())["variants"]
    above = {r["variant"] for r in records if (r["expert_share_of_floor"] or 0) > 1}
    assert above and all(name.endswith("fp32") for name in above)
    text = render_docs.render_backends(ROOT, artifact, False)
    marked = [line for line in text.splitlines() if line.startswith("|") and render_docs.BEATEN_MARK in line]
    assert {line.split("|")[1].strip() for line in marked} == above
    assert render_docs.BEATEN_NOTE in text
    amx = render_docs.render_backends(ROOT, "benchmarks/results/backends-smolvla-cpu.json", True)
    assert render_docs.BEATEN_MARK not in amx and render_docs.BEATEN_NOTE not in amx


def test_the_expert_profile_marks_a_share_above_its_floor(tmp_path):
    relative = "benchmarks/results/expert-profile-smolvla-avx512-bf16-cpu.json"
    assert render_docs.BEATEN_MARK not in render_docs.render_expert_profile(ROOT, relative)
    (tmp_path / relative).parent.mkdir(parents=True)
    for name in (relative, relative.replace(".json", ".meta.json")):
        shutil.copy(ROOT / name, tmp_path / name)
    doc = json.loads((tmp_path / relative).read_text())
    fast = doc["variants"][0]
    fast["step_p50_ms"] = fast["step_floor_ms"] / 1.2  # a step 20% under its floor: the floor was read too high
    (tmp_path / relative).write_text(json.dumps(doc))
    text = render_docs.render_expert_profile(tmp_path, relative)
    marked = [line for line in text.splitlines() if render_docs.BEATEN_MARK in line]
    assert len(marked) == 1 and f"**{fast['variant']}**" in marked[0] and "120%" in marked[0]
    assert render_docs.BEATEN_NOTE in text


def test_an_emulated_run_says_so_in_its_caption_and_its_target_line():
    """The committed run under --max-cpu-isa avx2 names the class it emulated, the host and every cap, and its target
    line says it is not a measurement on that class; a plain run's caption and target line say neither."""
    plain = render_docs.render_backends(ROOT, "benchmarks/results/backends-smolvla-avx512-bf16-cpu.json", True)
    assert "emulated" not in plain
    artifact = "benchmarks/results/backends-smolvla-emulated-avx2-cpu.json"
    cpu = json.loads((ROOT / artifact).read_text())["cpu"]
    text = render_docs.render_backends(ROOT, artifact, True)
    assert f"**emulated**: {cpu['emulates']}, on {cpu['model']}" in text
    assert all(f"`{name}={value}`" in text for name, value in cpu["isa_caps"].items()) and len(cpu["isa_caps"]) == 5
    assert "target for this CPU class, emulated: not a measurement on that class)" in text
    linear = render_docs.render_amx_linear(ROOT, "benchmarks/results/avx2-linear-smolvla-cpu.json")
    assert "**emulated**: an x86-64-v3 CPU" in linear and "`ONEDNN_MAX_CPU_ISA=AVX2`" in linear
    assert "emulated" not in render_docs.render_amx_linear(ROOT, "benchmarks/results/vnni-linear-smolvla-cpu.json")


@pytest.mark.parametrize("note", ["the host was busy.", "the host was busy"])
def test_a_sidecar_note_ends_the_provenance_line_with_one_full_stop(note):
    meta = {
        "cpu": {"model": "AMD EPYC", "logical_cores": 2, "flags": ["avx2"]},
        "load_average_before": [0.5],
        "load_average_after": [1.5],
        "command": "python3 benchmarks/backends.py",
        "started_utc": "2026-12-02T18:45:59+00:00",
        "git_revision": "5c80cb2",
        "wall_s": 12.0,
        "note": note,
    }
    line = render_docs.provenance(meta)
    assert line.endswith("wall time 12 s). The host was busy.*")
