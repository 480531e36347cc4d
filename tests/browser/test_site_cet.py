"""The leaderboard as a hardware chooser, in Chromium: the gate under every execution model against
``question.rank_question``, an approximate row ranked apart, projected rows (hand-built ``ProjectedRow`` objects)
ranked in their own question with their error band, a phone-sized screen, stable row URLs that open their question;
plus the bundled leaderboard that ``vlabench site build`` builds with no folder. Screenshots go to
test-artifacts/screenshots/."""

import json

import pytest
from typer.testing import CliRunner

from tests.support.paths import ROOT
from tests.support.site import TARGET_HZ, Visit, case_run_id, projected_row, python_order
from vlabench.analysis.cet import ExecutionModel
from vlabench.cli.app import app
from vlabench.leaderboard_site import board as site_board
from vlabench.leaderboard_site.build import build_site

SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
runner = CliRunner()


PROJECTED = [
    projected_row("rtx-4090", 40.0, 1599.0),
    projected_row("l4", 25.0, None),
    projected_row("h100-sxm", 9.0, 30000.0),
]


@pytest.fixture(scope="module")
def site(results_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("cet-site") / "site"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(site_board, "projections", lambda progress=None: PROJECTED)
        patch.setattr(site_board, "reported_entries", lambda: [])
        patch.setattr(site_board, "reported_energies", lambda entries: {})
        build_site([results_dir], out, control_hz=TARGET_HZ, projected=True)
    return out


@pytest.fixture(scope="module")
def index(browser, site):
    visit = Visit(browser, site, "index.html")
    yield visit
    visit.page.close()


def _shot(page, name: str, **options) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), **options)


def _set(index: Visit, mode: str = "per-step", n: int = 1, hz: float = TARGET_HZ, priority: str = "cost") -> None:
    index.page.select_option("#execution", mode)
    if mode != "per-step":  # N is disabled per step (one action per inference)
        index.page.fill("#chunk-n", str(n))
    index.page.fill("#control-hz", str(hz))
    index.page.select_option("#priority", priority)


def _page_rows(index: Visit) -> dict[str, dict]:
    data = {row["id"]: row for row in index.data()["rows"]}
    return {cell["id"]: {**data[cell["id"]], **cell, "order": i} for i, cell in enumerate(index.rows())}


def _ranked(rows: dict[str, dict], kind: str = "run") -> list[str]:
    ordered = sorted((r for r in rows.values() if r["kind"] == kind and r["rank"] != "—"), key=lambda r: r["order"])
    return [r["run_id"] if kind == "run" else r["id"] for r in ordered]


@pytest.mark.parametrize(
    ("mode", "n", "hz"),
    [("per-step", 1, TARGET_HZ), ("sync", 5, 4 * TARGET_HZ), ("async", 5, 40 * TARGET_HZ), ("sync", 2, 200.0)],
)
def test_the_gate_and_ranking_follow_rank_question_under_every_execution_model(index, results_dir, mode, n, hz):
    execution = ExecutionModel(mode=mode, actions_per_chunk=n)
    for priority in ("cost", "time"):
        _set(index, mode, n, hz, priority)
        rows = _page_rows(index)
        expected, infeasible = python_order(results_dir, priority, hz, execution)
        assert _ranked(rows) == expected, (mode, n, hz, priority)
        runs = {row["run_id"]: row for row in rows.values() if row["kind"] == "run"}
        assert {key for key, row in runs.items() if row["infeasible"]} == infeasible
        for key in infeasible:
            assert runs[key]["rank"] == "—" and runs[key]["status"].startswith("infeasible: ")
    _set(index)


def test_an_infeasible_reason_is_the_python_gates_word_for_word(index, results_dir):
    from vlabench.analysis.cet import rank
    from vlabench.results.aggregate import load_results, results_frame

    loaded, _ = load_results([results_dir])
    run_id = {str(path): result.run_id for path, result in loaded}
    for mode, n, hz in (("per-step", 1, 500.0), ("sync", 3, 300.0), ("async", 2, 900.0)):
        _set(index, mode, n, hz)
        frame = results_frame(loaded, hz)
        frame = rank(
            frame[frame["serving"].isna()], "cost", hz, execution=ExecutionModel(mode=mode, actions_per_chunk=n)
        )
        reasons = {run_id[f]: r for f, r, m in zip(frame["file"], frame["reasons"], frame["model"], strict=True) if r}
        assert reasons, (mode, hz)
        shown = {row["run_id"]: row["status"] for row in _page_rows(index).values() if row["kind"] == "run"}
        for key, reason in reasons.items():
            if key in shown:
                assert shown[key] == f"infeasible: {reason}", (mode, shown[key], reason)
    _set(index)


def test_an_approximate_row_ranks_apart_unless_asked(index, results_dir):
    rows = _page_rows(index)
    dp = next(row for row in rows.values() if row.get("run_id") == case_run_id(results_dir, "dp-cache"))
    assert dp["rank"].startswith("1 ≈") and "≈ approximate, action error 0.05" in dp["stack"]
    exact = [row for row in rows.values() if row["kind"] == "run" and not row["approximate"]]
    assert exact and all(row["order"] < dp["order"] for row in exact if row["rank"] != "—")
    index.page.check("#approximate-together")
    together, _ = python_order(results_dir, "cost", TARGET_HZ, approximate_separately=False)
    merged = _page_rows(index)
    assert _ranked(merged) == together and "≈" not in merged[dp["id"]]["rank"]
    index.page.uncheck("#approximate-together")


def test_projected_rows_rank_in_their_own_question_with_their_band(index):
    index.page.select_option("#model", "pi0")
    rows = _page_rows(index)
    assert {row["device"] for row in rows.values()} == {"rtx-4090", "l4", "h100-sxm"}
    assert all(row["provenance"] == "projected" for row in rows.values())
    badge = index.page.locator(f"#row-{next(r['id'] for r in rows.values() if r['device'] == 'h100-sxm')} .badge")
    assert badge.inner_text() == "projected ±18%"
    # one of three has no purchase price: the question falls back to electricity only, ranked and marked, never empty
    assert all(row["rank"] != "—" and row["cost"].endswith("elec. only") for row in rows.values())
    assert all(row["hour"].endswith("elec. only") for row in rows.values())
    l4 = next(row for row in rows.values() if row["device"] == "l4")
    assert "no purchase price: electricity only" in l4["status"]
    index.page.select_option("#priority", "time")
    timed = _page_rows(index)
    assert [timed[key]["device"] for key in _ranked(timed, "projected")] == ["h100-sxm", "l4", "rtx-4090"]
    index.page.select_option("#priority", "cost")
    index.page.select_option("#model", "smolvla-tiny")


def test_a_row_link_opens_its_question(index, site):
    table = json.loads((site / "leaderboard.json").read_text())["rows"]
    projected = next(row for row in table if row["device"] == "l4")
    index.page.goto((site / "index.html").as_uri() + f"#row={projected['id']}")
    index.page.wait_for_selector(f"#row-{projected['id']}.target")
    assert index.page.input_value("#model") == "pi0"
    assert index.page.locator("#leaderboard tr.target").count() == 1
    index.page.goto((site / "index.html").as_uri())
    index.page.wait_for_selector("body[data-ready]")


def test_a_phone_scrolls_the_table_inside_its_box(browser, site):
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.goto((site / "index.html").as_uri())
    phone.wait_for_selector("body[data-ready]")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390  # the page itself never scrolls sideways
    box = phone.evaluate(
        "(() => { const b = document.querySelector('.table-box'); return [b.scrollWidth, b.clientWidth] })()"
    )
    assert box[0] > box[1]  # the table scrolls inside its box
    _shot(phone, "index-390px", full_page=False)
    phone.close()


def test_the_bundled_leaderboard_builds_from_one_command(tmp_path):
    result = runner.invoke(app, ["site", "build", "-o", str(tmp_path / "site"), "--no-projected"])
    assert result.exit_code == 0, result.output
    assert "site build: reading results" in result.output and "site build: ranking" in result.output  # progress
    table = json.loads((tmp_path / "site" / "leaderboard.json").read_text())["rows"]
    measured = [row for row in table if row["run_id"]]
    assert {(row["model"], row["device"]) for row in measured} >= {("smolvla", "generic-x86-cpu")}
    assert {row["deployment"] for row in measured} == {"on-robot", "served", "offload"}  # every deployment
    assert any(row["provenance"] == "reported" for row in table)
    smolvla = next(row for row in measured if row["model"] == "smolvla")
    page = (tmp_path / "site" / "runs" / f"{smolvla['id']}.html").read_text()
    assert f'href="{smolvla["id"]}.profile.json"' in page  # the shipped profile of the same configuration
    assert (tmp_path / "site" / "runs" / f"{smolvla['id']}.profile.json").is_file()


@pytest.fixture(scope="module")
def overlapping(browser, results_dir, tmp_path_factory):
    """The three projections plus an A100 at 44 ms, within the ±18% band of the RTX 4090's 40 ms; no published
    rows."""
    out = tmp_path_factory.mktemp("band-site") / "site"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            site_board, "projections", lambda progress=None: [*PROJECTED, projected_row("a100-80gb", 44.0, 17000.0)]
        )
        patch.setattr(site_board, "reported_entries", lambda: [])
        patch.setattr(site_board, "reported_energies", lambda entries: {})
        build_site([results_dir], out, control_hz=TARGET_HZ, projected=True)
    visit = Visit(browser, out, "index.html#model=pi0&by=time")
    yield visit
    visit.page.close()


def test_projections_whose_bands_overlap_are_not_ranked_apart(overlapping):
    rows = {row["device"]: row for row in _page_rows(overlapping).values()}
    # 9 ms and 25 ms are apart at ±18%; 40 and 44 ms overlap, so they share a rank, marked and explained
    assert rows["h100-sxm"]["rank"].startswith("1") and rows["l4"]["rank"].startswith("2")
    assert rows["rtx-4090"]["rank"].startswith("3=") and rows["a100-80gb"]["rank"].startswith("3=")
    assert "within the ±18% band of rtx-4090 (pytorch-eager): not ranked apart" in rows["a100-80gb"]["status"]
    assert "band of" not in rows["l4"]["status"] and "=" not in rows["l4"]["rank"]
    _shot(overlapping.page.locator("#ranking"), "band-overlap")
