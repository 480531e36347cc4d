"""`vlabench compare` (bootstrap latency, energy and correctness regressions between two folders) and `vlabench
validate` (publication checks), on results derived from one real tiny run."""

import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.support.result_variants import with_e2e_samples, with_power
from vlabench.cli.app import app
from vlabench.commands.run import execute, plan_run
from vlabench.measure.correctness import TOLERANCES, Correctness
from vlabench.results.compare import Settings, compare_folders
from vlabench.results.compare_latency import Latency, bootstrap_relative_median_change, drift, latency_change
from vlabench.results.schema import RunResult, write_result

runner = CliRunner()


@pytest.fixture(scope="module")
def measured(fast_run) -> RunResult:
    config = fast_run.config(
        model="pi0-tiny", min_iterations=3, energy_meter=None, energy_window_s=1, idle_window_s=0.1
    )
    return execute(plan_run(config))


def variant(
    result: RunResult, run_id: str, samples: list[float], config_hash: str | None = None, power: float = 1.0, **energy
) -> RunResult:
    """A consistent copy with other e2e samples (and identity, power times ``power``, other energy labels)."""
    changed = with_power(with_e2e_samples(result, samples), power, **energy)
    return changed.model_copy(update={"run_id": run_id, "config_hash": config_hash or result.config_hash})


FAILED_GATE = Correctness(
    max_abs_error=0.5,
    cosine=0.5,
    relative_error=0.5,
    displacement_cosine=0.5,
    tolerance=TOLERANCES["fp32"],
    passed=False,
)


def samples(median: float, seed: int, count: int = 30) -> list[float]:
    return list(np.random.default_rng(seed).normal(median, median * 0.01, count))


def test_bootstrap_interval_is_seeded_and_brackets_the_point_estimate():
    base, cand = samples(100, 1), samples(110, 2)
    first = bootstrap_relative_median_change(base, cand, 0.95, 2000, seed=3)
    assert first == bootstrap_relative_median_change(base, cand, 0.95, 2000, seed=3)
    point, low, high = first
    assert low < point < high and point == pytest.approx(0.10, abs=0.01)
    narrow = bootstrap_relative_median_change(base, cand, 0.5, 2000, seed=3)
    assert low < narrow[1] < narrow[2] < high


def test_compare_flags_a_latency_regression_lists_unmatched_runs_and_exits_6(measured, tmp_path):
    base, cand = tmp_path / "base", tmp_path / "cand"
    write_result(variant(measured, "a" * 32, samples(100, 1)), base)
    write_result(variant(measured, "b" * 32, samples(50, 2), config_hash="only-in-base"), base)
    write_result(variant(measured, "c" * 32, samples(112, 3)), cand)
    write_result(variant(measured, "d" * 32, samples(50, 4), config_hash="only-in-cand"), cand)
    report = compare_folders(base, cand, Settings())
    assert [m.latency.verdict for m in report.matches] == ["regression"]
    assert report.matches[0].latency.ci_low > 0
    energy = report.matches[0].energy  # at the same power, a slower inference takes more energy
    assert energy.relative_change == pytest.approx(report.matches[0].latency.relative_change, abs=0.03)
    assert len(report.only_baseline) == len(report.only_candidate) == 1
    shown = runner.invoke(app, ["compare", str(base), str(cand)])
    assert shown.exit_code == 6
    assert "regression" in shown.stdout and "only in baseline" in shown.stdout and "only in candidate" in shown.stdout


def test_compare_passes_noise_below_the_threshold_and_reports_an_improvement(measured, tmp_path):
    base, cand = tmp_path / "base", tmp_path / "cand"
    write_result(variant(measured, "a" * 32, samples(100, 1)), base)
    write_result(variant(measured, "c" * 32, samples(102, 3)), cand)
    assert runner.invoke(app, ["compare", str(base), str(cand)]).exit_code == 0
    assert runner.invoke(app, ["compare", str(base), str(cand), "--threshold", "0.005"]).exit_code == 6
    assert runner.invoke(app, ["compare", str(cand), str(base), "--threshold", "0.005"]).exit_code == 0
    report = compare_folders(cand, base, Settings(threshold=0.005))
    assert report.matches[0].latency.verdict == "improvement"


def test_compare_flags_energy_and_correctness_regressions(measured, tmp_path):
    base, cand = tmp_path / "base", tmp_path / "cand"
    write_result(variant(measured, "a" * 32, samples(100, 1)), base)
    write_result(variant(measured, "c" * 32, samples(100, 1), power=1.2), cand)
    energy = compare_folders(base, cand, Settings()).matches[0].energy
    assert energy.verdict == "regression" and energy.relative_change == pytest.approx(0.2)
    assert compare_folders(base, cand, Settings(energy_threshold=0.25)).regressions == []
    relabelled = tmp_path / "relabelled"
    write_result(variant(measured, "e" * 32, samples(100, 1), label="measured", method="rapl"), relabelled)
    assert compare_folders(base, relabelled, Settings()).matches[0].energy.verdict == "not comparable"
    broken = tmp_path / "broken"
    failing = variant(measured, "f" * 32, samples(100, 1))
    failing = failing.model_copy(update={"correctness": FAILED_GATE})
    write_result(failing, broken)
    match = compare_folders(base, broken, Settings()).matches[0]
    assert match.correctness_regressed and match.regressed


def test_compare_rejects_bad_settings_and_missing_folders(tmp_path):
    assert runner.invoke(app, ["compare", str(tmp_path), str(tmp_path), "--confidence", "1.5"]).exit_code == 2
    missing = runner.invoke(app, ["compare", str(tmp_path / "nope"), str(tmp_path)])
    assert missing.exit_code == 2 and "no such file or folder" in missing.stderr


def test_validate_accepts_a_complete_result_with_the_requirements_it_meets(measured, tmp_path):
    write_result(measured, tmp_path)
    args = ["validate", str(tmp_path), "--min-iterations", "3", "--min-duration", "0", "--allow-dirty"]
    checked = runner.invoke(app, args)
    assert checked.exit_code == 0, checked.stdout
    assert "1 result files checked, 0 with problems" in checked.stdout


def test_validate_lists_every_problem_with_file_and_field_and_exits_6(measured, tmp_path):
    (tmp_path / "garbled.json").write_text("{oops")
    data = json.loads(measured.model_dump_json())
    del data["timing"]["phases"], data["control"]
    (tmp_path / "schema.json").write_text(json.dumps(data))
    weak = measured.model_copy(
        update={
            "run_id": "w" * 32,
            "energy": None,
            "correctness": FAILED_GATE,
            "provenance": measured.provenance.model_copy(update={"git_revision": None, "command_line": []}),
        }
    )
    weak_path = write_result(weak, tmp_path)
    checked = runner.invoke(app, ["validate", str(tmp_path), "--json", "--allow-dirty"])
    assert checked.exit_code == 6
    problems = {(p["file"].rsplit("/", 1)[-1], p["field"]) for p in json.loads(checked.stdout)}
    assert problems == {
        ("garbled.json", "<file>"),
        ("schema.json", "timing.phases"),
        ("schema.json", "control"),
        (weak_path.name, "provenance.git_revision"),
        (weak_path.name, "provenance.command_line"),
        (weak_path.name, "correctness.passed"),
        (weak_path.name, "timing.iterations"),
        (weak_path.name, "timing.timed_duration_s"),
        (weak_path.name, "energy"),
    }
    table = runner.invoke(app, ["validate", str(tmp_path), "--allow-dirty"])
    assert table.exit_code == 6 and "3 result files checked, 3 with problems" in table.stdout


def test_validate_of_a_folder_without_results_is_bad_input(tmp_path):
    (tmp_path / "x.trace.json").write_text("{}")
    empty = runner.invoke(app, ["validate", str(tmp_path)])
    assert empty.exit_code == 2 and "no result files" in empty.stderr


def test_drift_is_how_far_a_runs_median_moves_over_its_own_length():
    assert drift([100.0] * 10) == 0.0
    assert drift([100.0] * 5 + [110.0] * 5) == pytest.approx(10.0 / 105.0)
    assert drift([100.0, 200.0, 300.0]) == 0.0  # too few to split


def test_a_change_within_the_runs_own_drift_is_no_regression(measured):
    """Each run drifts by 10% over its length (half its samples near 100 ms, half near 110 ms), and the candidate is
    15% slower: the bootstrap alone calls it significant, the runs' drift says they cannot tell it from noise."""

    def drifting(level: float, seed: int) -> list[float]:
        rng = np.random.default_rng(seed)
        return list(rng.normal(level, 0.2, 15)) + list(rng.normal(level * 1.1, 0.2, 15))

    base = variant(measured, "a" * 32, drifting(100.0, 1))
    cand = variant(measured, "c" * 32, drifting(115.0, 2))
    point, low, _ = bootstrap_relative_median_change(
        base.timing.samples_ms["e2e"], cand.timing.samples_ms["e2e"], 0.95, 2000, 0
    )
    assert low > 0 and point > 0.05  # significant and above the threshold within the runs
    latency = changed([base], [cand])
    assert latency.verdict == "unchanged" and latency.noise > 0.1 and latency.ci_low < 0
    assert latency.minimum_detectable > 0.1  # it says how large a change it could have seen
    steady = changed([variant(measured, "a" * 32, samples(100, 1))], [variant(measured, "c" * 32, samples(115, 2))])
    assert steady.verdict == "regression" and steady.noise < 0.02  # the same change on steady runs is flagged
    assert steady.minimum_detectable == pytest.approx(0.05)  # the threshold: the interval is narrower


def changed(baseline: list[RunResult], candidate: list[RunResult], **settings) -> Latency:
    chosen = Settings(**settings)
    fields = ("threshold", "confidence", "resamples", "seed", "phase")
    return latency_change(baseline, candidate, **{name: getattr(chosen, name) for name in fields})


def runs(measured: RunResult, prefix: str, levels: list[float], start: datetime, **state) -> list[RunResult]:
    """One steady run per level, started a minute apart from ``start`` (``state``: its system state's fields)."""
    made = []
    for index, level in enumerate(levels):
        run = variant(measured, f"{prefix}{index}".ljust(32, "0"), samples(level, hash((prefix, index)) % 1000))
        system = run.system_state.model_copy(update={"background_cpu_percent": 0.0, **state})
        begun = start + timedelta(minutes=2 * index)
        finished = begun + (run.finished_utc - run.started_utc)
        update = {"started_utc": begun, "finished_utc": finished, "system_state": system, "warnings": []}
        made.append(run.model_copy(update=update))
    return made


T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
BETWEEN = T0 + timedelta(minutes=1)


def test_one_disturbed_run_makes_no_regression_and_hides_none(measured):
    """Interleaved runs: a candidate run slowed 40% by other load, or a baseline run 8% faster than the others, is
    no regression (the typical median does not move); a uniform 25% slowdown is one even with a disturbed baseline
    run, and so is a candidate whose every run is slower."""
    base = runs(measured, "a", [100, 100, 100], T0)
    assert changed(base, runs(measured, "b", [100, 140, 100], BETWEEN)).verdict == "unchanged"
    assert changed(runs(measured, "a", [100, 92, 100], T0), runs(measured, "b", [100, 100, 100], BETWEEN)).verdict == (
        "unchanged"
    )
    disturbed = runs(measured, "a", [100, 160, 100], T0)
    slowed = changed(disturbed, runs(measured, "b", [125, 125, 125], BETWEEN))
    assert slowed.verdict == "regression" and slowed.relative_change == pytest.approx(0.25, abs=0.02)
    assert slowed.caveats == [] and slowed.baseline.runs == 3 and slowed.least_disturbed_change > 0.2


def test_the_verdict_carries_background_load_too_few_runs_and_unsteady_runs(measured, tmp_path):
    single = changed(runs(measured, "a", [100], T0), runs(measured, "b", [100], BETWEEN))
    assert any("1 run(s) on a side" in caveat and "interleave at least 3" in caveat for caveat in single.caveats)
    batches = changed(runs(measured, "a", [100] * 3, T0), runs(measured, "b", [100] * 3, T0 + timedelta(hours=1)))
    assert any("not interleaved" in caveat for caveat in batches.caveats)
    loaded = runs(measured, "b", [130, 130, 130], BETWEEN, background_cpu_percent=100.0, load_average_1m=3.5)
    flagged = changed(runs(measured, "a", [100] * 3, T0), loaded)
    assert flagged.verdict == "regression" and flagged.candidate.busy == 3
    assert any("candidate: 3 of 3 runs" in c and "load average 3.50–3.50" in c for c in flagged.caveats)
    base, cand = tmp_path / "base", tmp_path / "cand"
    for run in runs(measured, "a", [100] * 3, T0):
        write_result(run, base)
    for run in loaded:
        write_result(run, cand)
    shown = runner.invoke(app, ["compare", str(base), str(cand)])
    said = " ".join(shown.stdout.split())
    assert shown.exit_code == 6 and "regression*" in said and "more than 25% busy" in said and "detects ≥" in said
    assert "1 regressed configuration(s) (1 with caveats" in " ".join(shown.stderr.split())
    report = json.loads(runner.invoke(app, ["compare", str(base), str(cand), "--json"]).stdout)
    [match] = report["matches"]
    assert len(match["candidate_runs"]) == 3 and match["latency"]["candidate"]["load_average_1m"] == [3.5] * 3


def test_an_unsteady_run_is_left_out_of_the_typical_median(measured):
    def drifting(level: float, seed: int) -> list[float]:
        rng = np.random.default_rng(seed)
        return list(rng.normal(level, 0.2, 15)) + list(rng.normal(level * 1.6, 0.2, 15))

    base = runs(measured, "a", [100] * 3, T0)
    cand = runs(measured, "b", [100] * 3, BETWEEN)
    for index in (1, 2):  # disturbed half-way through: +60%, their medians ~30% above the steady run's
        cand[index] = variant(cand[index], cand[index].run_id, drifting(100, index))
    latency = changed(base, cand)
    assert latency.candidate.unsteady == 2 and latency.verdict == "unchanged"
    assert latency.candidate_p50_ms == pytest.approx(100, rel=0.01)
    assert any("2 of 3 runs drifted more than 10%" in caveat for caveat in latency.caveats)


def test_a_change_only_the_least_disturbed_runs_show_is_no_regression(measured):
    """Two baseline runs 8% faster than the candidate's, three slower: the typical medians say the candidate is
    faster, so the least disturbed runs' +9% is no regression."""
    base = runs(measured, "a", [92, 92.5, 108, 108, 108], T0)
    latency = changed(base, runs(measured, "b", [100] * 5, BETWEEN))
    assert latency.least_disturbed_change > 0.05 and latency.ci_low > 0 and latency.relative_change < 0
    assert latency.verdict == "unchanged"


def test_a_machine_too_loaded_for_two_runs_to_agree_calls_nothing(measured):
    """Each side's runs 30-60% apart (as under heavy load on a shared CPU): the spread between processes widens the
    interval past the +30% the least disturbed runs show, and the minimum detectable change says so."""
    latency = changed(runs(measured, "a", [100, 160, 220], T0), runs(measured, "b", [130, 250, 200], BETWEEN))
    assert latency.baseline.spread == pytest.approx(0.6, abs=0.02) and latency.relative_change > 0.05
    assert latency.verdict == "unchanged" and latency.minimum_detectable > 0.5
