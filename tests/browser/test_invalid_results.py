"""A run whose backend returns NaN actions fails the correctness gate; its result keeps the NaN error and every
reader (aggregate, rank, compare, validate, the site) shows it as invalid with the reason, never skips it. Files
written before non-finite values were kept (the error stored as null) still load, as invalid."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from tests.support.site import Tab, board_data
from vlabench.backends.torch.backend import TorchBackend, TorchPolicy
from vlabench.cli.app import app
from vlabench.commands.run import execute_many, plan_run
from vlabench.leaderboard_site.build import build_site
from vlabench.models.replicas import build_replica
from vlabench.optimizations.fidelity import ActionError
from vlabench.results.aggregate import load_results, results_frame
from vlabench.results.schema import Optimization, RunResult, load_result, write_result
from vlabench.vocab import Precision

NAN_REASON = "failed the correctness gate: relative action error nan"
NULL_REASON = "failed the correctness gate: action error not recorded"
runner = CliRunner()


class NaNPolicy(TorchPolicy):
    """Eager torch whose action expert returns NaN velocities, as pi0-tiny does on OpenVINO bf16."""

    @torch.inference_mode()
    def denoise_step(self, x_t, t, cache):
        return torch.full_like(super().denoise_step(x_t, t, cache), float("nan"))


class GatedTorch(TorchBackend):
    """Eager torch as a backend under test (a subclass is not the reference, so it is gated): correct before an
    upgrade, NaN after it (one backend name, so compare matches the two runs)."""

    name = "torch-gated"

    def __init__(self, returns_nan: bool) -> None:
        super().__init__()
        self.returns_nan = returns_nan

    def prepare(self, spec, workload, device, precision, seed):
        policy = NaNPolicy if self.returns_nan else TorchPolicy
        return policy(build_replica(spec, seed, Precision.DTYPES[precision], device), device)


def _no_bare_constants(text: str):
    """JSON as the site's JavaScript reads it: ``JSON.parse`` rejects NaN and Infinity."""

    def refuse(constant: str):
        raise AssertionError(f"bare {constant} in JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def folders(fast_run, tmp_path_factory) -> dict[str, Path]:
    """base/: pi0-tiny on a gated backend that passes; nan/: the same configuration when the backend returns NaN;
    legacy/: that result as older vlabench wrote it (non-finite errors stored as null)."""
    root = tmp_path_factory.mktemp("invalid-results")
    config = fast_run.config(
        model="pi0-tiny", backend="torch", energy_meter="estimated", energy_window_s=1.0, idle_window_s=0.1
    )
    good, bad = plan_run(config), plan_run(config)
    object.__setattr__(good, "backend", GatedTorch(returns_nan=False))
    object.__setattr__(bad, "backend", GatedTorch(returns_nan=True))
    passing, broken = execute_many([good, bad])
    assert passing.valid and passing.correctness.relative_error == 0 and passing.config_hash == broken.config_hash
    written = {"base": write_result(passing, root / "base"), "nan": write_result(broken, root / "nan")}
    legacy = json.loads(written["nan"].read_text())
    legacy["correctness"].update(max_abs_error=None, cosine=None, relative_error=None, displacement_cosine=None)
    (root / "legacy").mkdir()
    written["legacy"] = root / "legacy" / written["nan"].name
    written["legacy"].write_text(json.dumps(legacy, indent=2))
    return written


def test_a_nan_error_is_stored_as_such_and_reads_back_as_nan(folders):
    stored = _no_bare_constants(folders["nan"].read_text())
    assert stored["correctness"]["relative_error"] == "NaN" and stored["correctness"]["passed"] is False
    result = load_result(folders["nan"])
    assert math.isnan(result.correctness.relative_error) and math.isnan(result.correctness.displacement_cosine)
    assert not result.valid and result.invalid_reason == NAN_REASON
    again = RunResult.model_validate_json(result.model_dump_json())
    assert math.isnan(again.correctness.relative_error) and again.invalid_reason == NAN_REASON
    loaded, skipped = load_results([folders["nan"].parent, folders["base"].parent])
    assert skipped == [] and len(loaded) == 2
    frame = results_frame(loaded, control_hz=1.0).set_index("valid")
    assert math.isnan(frame.loc[False, "action_error"]) and frame.loc[True, "action_error"] == 0
    assert frame.loc[False, "invalid_reason"] == NAN_REASON and pd.isna(frame.loc[True, "invalid_reason"])


def test_non_finite_figures_in_other_blocks_are_kept_too(folders):
    result = load_result(folders["nan"])
    nan = float("nan")
    changed = result.model_copy(
        update={
            "energy": result.energy.model_copy(update={"joules_per_action": float("inf")}),
            "cost": result.cost.model_copy(update={"usd_per_million_actions": nan}),
            "optimization": Optimization(
                dp_cache=None,
                fuse_expert_kv=False,
                dp_cache_error=ActionError(max_abs=nan, rmse=nan, cosine=nan, relative=float("-inf")),
            ),
        }
    )
    stored = _no_bare_constants(changed.model_dump_json())
    assert stored["energy"]["joules_per_action"] == "Infinity" and stored["cost"]["usd_per_million_actions"] == "NaN"
    assert stored["optimization"]["dp_cache_error"]["relative"] == "-Infinity"
    again = RunResult.model_validate_json(changed.model_dump_json())
    assert again.energy.joules_per_action == float("inf") and math.isnan(again.cost.usd_per_million_actions)
    assert again.optimization.dp_cache_error.relative == float("-inf")


def test_a_result_with_a_null_error_loads_as_invalid_with_the_reason(folders):
    result = load_result(folders["legacy"])
    assert result.correctness.relative_error is None and not result.valid
    assert result.invalid_reason == NULL_REASON
    assert load_results([folders["legacy"].parent]) == ([(folders["legacy"], result)], [])


@pytest.mark.parametrize(("case", "reason"), [("nan", NAN_REASON), ("legacy", NULL_REASON)])
def test_rank_shows_the_invalid_run_unranked_with_its_reason(folders, case, reason):
    paths = [str(folders["base"].parent), str(folders[case].parent)]
    ranked = runner.invoke(app, ["rank", *paths, "--json", "--control-hz", "1", "--priority", "time"])
    assert ranked.exit_code == 0, ranked.output
    assert "skipped" not in ranked.stderr
    rows = {row["valid"]: row for row in json.loads(ranked.stdout)}
    assert rows[True]["rank"] == 1 and rows[True]["feasible"]
    assert rows[False]["rank"] is None and not rows[False]["feasible"]
    assert reason in rows[False]["reasons"] and rows[False]["invalid_reason"] == reason
    table = runner.invoke(app, ["rank", *paths, "--control-hz", "1"])
    assert table.exit_code == 0 and "skipped" not in table.stderr
    assert "correctness" in table.stdout and "Traceback" not in table.output


@pytest.mark.parametrize(("case", "reason"), [("nan", NAN_REASON), ("legacy", NULL_REASON)])
def test_compare_calls_the_invalid_candidate_a_correctness_regression(folders, case, reason):
    args = ["compare", str(folders["base"].parent), str(folders[case].parent)]
    compared = runner.invoke(app, [*args, "--json"])
    assert compared.exit_code == 6, compared.output
    report = json.loads(compared.stdout)
    assert report["skipped"] == [] and len(report["matches"]) == 1
    match = report["matches"][0]
    assert match["correctness_regressed"] and match["candidate_invalid_reason"] == reason
    table = runner.invoke(app, args)
    assert table.exit_code == 6 and "INVALID" in table.stdout and "regressed" in table.stderr


@pytest.mark.parametrize(
    ("case", "field", "reason"),
    [("nan", "correctness.passed", NAN_REASON), ("legacy", "correctness.relative_error", NULL_REASON)],
)
def test_validate_reports_the_gate_failure_not_an_unreadable_file(folders, case, field, reason):
    args = ["validate", str(folders[case]), "--json", "--allow-dirty", "--min-iterations", "2", "--min-duration", "0"]
    checked = runner.invoke(app, args)
    assert checked.exit_code == 6, checked.output
    problems = json.loads(checked.stdout)
    assert [(p["field"], p["message"]) for p in problems] == [(field, reason)]


@pytest.fixture(scope="module")
def site(folders, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("invalid-site") / "site"
    report = build_site([folders[case].parent for case in ("base", "nan")], out)
    assert report.skipped == [] and report.runs == 2
    return out


def test_the_site_shows_the_invalid_run_unranked_with_its_reason(site, folders, tmp_path):
    table = _no_bare_constants((site / "leaderboard.json").read_text())["rows"]
    row = next(r for r in table if not r["valid"])
    assert row["rank"] is None and row["feasible"] is False and row["valid"] is False
    assert NAN_REASON in row["reasons"] and row["invalid_reason"] == NAN_REASON
    shown = next(r for r in board_data(site)["rows"] if r["id"] == row["id"])  # what the page's script reads
    assert shown["action_error_note"] == "NaN" and shown["action_error"] is None and not shown["valid"]
    legacy = build_site([folders["legacy"].parent], tmp_path / "legacy-site")
    assert legacy.skipped == [] and legacy.runs == 1
    shown = board_data(tmp_path / "legacy-site")["rows"][0]
    assert shown["invalid_reason"] == NULL_REASON and shown["action_error_note"] == "not recorded"


def test_the_invalid_run_in_the_browser(browser, site):
    tab = Tab(browser.new_page(viewport={"width": 1400, "height": 900}), site)
    try:
        index = tab.open("index.html")
        index.check_clean()  # the page script read the table, NaN run included
        row = next(r for r in index.data()["rows"] if r["kind"] == "run" and not r["valid"])
        shown = next(r for r in index.rows() if r["id"] == row["id"])
        assert shown["infeasible"] and shown["rank"] == "—" and NAN_REASON in shown["status"]
        stack = index.page.locator(f"#leaderboard tr[data-id='{row['id']}'] td.stack")
        assert stack.inner_text().endswith("action error NaN ✗")
        index.page.select_option("#priority", "time")  # re-ranked by the page script: still unranked
        shown = next(r for r in index.rows() if r["id"] == row["id"])
        assert shown["rank"] == "—" and NAN_REASON in shown["status"]
        run = tab.open(f"runs/{row['id']}.html")  # a run page's stable name
        run.check_clean()
        assert run.page.locator(".flag.invalid").inner_text() == f"{NAN_REASON}: never ranked"
        raw = (site / "runs" / run.page.locator("a", has_text="raw result JSON").get_attribute("href")).read_text()
        assert run.page.evaluate("text => JSON.parse(text).correctness.relative_error", raw) == "NaN"
        correctness = run.page.locator("h2:text('Correctness') + table.kv").inner_text()
        assert "NaN" in correctness and "None" not in correctness
    finally:
        tab.page.close()
