"""The CET leaderboard site: built from real `vlabench run` results plus hand-written edge cases, checked in a
real headless Chromium (Playwright)."""

import json

import pytest

from tests.support.site import MEASURED_MODEL, TARGET_HZ, XSS_DEVICE, XSS_MODEL, Visit, case_run_id, python_order
from vlabench.leaderboard_site.rows import slug


@pytest.fixture(scope="module")
def index(browser, built):
    visit = Visit(browser, built[1], "index.html")
    yield visit
    visit.page.close()


def _ranked_run_ids(visit: Visit) -> list[str]:
    """The measured rows the page ranks in the question it shows, in page order."""
    run_id = {row["id"]: row["run_id"] for row in visit.data()["rows"] if row["kind"] == "run"}
    return [run_id[row["id"]] for row in visit.rows() if row["id"] in run_id and row["rank"].split()[0] != "—"]


def test_index_loads_offline_without_errors(index):
    index.check_clean()
    assert index.page.input_value("#model") == MEASURED_MODEL  # the model with the most measured rows
    index.page.evaluate("document.getElementById('charts').scrollIntoView()")
    index.page.wait_for_function("document.querySelectorAll('#charts .js-plotly-plot').length === 3")
    index.check_clean()  # plotly's basic bundle, from the site
    assert "of" in index.page.text_content("#shown")
    index.screenshot("index")


def test_injected_script_renders_as_text(index):
    index.page.select_option("#model", XSS_MODEL)
    assert index.page.evaluate("typeof window.__pwned") == "undefined"
    assert index.page.locator("#leaderboard td", has_text=XSS_DEVICE).count() == 1
    assert XSS_MODEL in index.page.text_content("#answer")
    assert index.page.locator("#model option", has_text=XSS_MODEL).count() == 1
    index.page.select_option("#model", MEASURED_MODEL)


def test_priority_selector_reranks_like_the_python_ranking(index, results_dir):
    for priority in ("time", "energy", "cost"):
        index.page.select_option("#priority", priority)
        expected, _ = python_order(results_dir, priority, TARGET_HZ)
        assert _ranked_run_ids(index) == expected, priority
    cheap = case_run_id(results_dir, "cheap")
    assert _ranked_run_ids(index)[0] == cheap  # cost: the cheap device first
    index.page.select_option("#priority", "time")
    exact = [key for key in _ranked_run_ids(index) if key != case_run_id(results_dir, "dp-cache")]  # approximate: apart
    assert exact[-1] == cheap and exact[0] != cheap
    rows = {row["id"]: row for row in index.rows()}
    invalid = next(r["id"] for r in index.data()["rows"] if r.get("run_id") == case_run_id(results_dir, "invalid"))
    assert rows[invalid]["infeasible"] and rows[invalid]["rank"] == "—"
    assert "failed the correctness gate" in rows[invalid]["status"]
    index.page.select_option("#priority", "cost")


def test_control_rate_target_greys_infeasible_rows(index, results_dir):
    data = {row["run_id"]: row for row in index.data()["rows"] if row["model"] == MEASURED_MODEL}
    cheap = data[case_run_id(results_dir, "cheap")]
    hz = {key: 1000.0 / row["latency_p99_ms"] for key, row in data.items()}  # per step: the p99 inference rate
    others = min(hz[key] for key, row in data.items() if key != cheap["run_id"] and row["valid"])
    target = round((hz[cheap["run_id"]] + others) / 2, 1)
    index.page.fill("#control-hz", str(target))
    rows = {row["id"]: row for row in index.rows()}
    assert rows[cheap["id"]]["infeasible"] and "inferences/s at p99 <" in rows[cheap["id"]]["status"]
    _, infeasible = python_order(results_dir, "cost", target)
    assert {data[r]["id"] for r in infeasible} == {i for i, row in rows.items() if row["infeasible"]}
    assert _ranked_run_ids(index) == python_order(results_dir, "cost", target)[0]
    index.page.fill("#control-hz", "1e9")
    assert all(row["infeasible"] for row in index.rows())
    assert index.page.text_content("#answer").startswith("No exact row of smolvla-tiny")
    index.page.fill("#control-hz", str(TARGET_HZ))


def test_the_rows_kept_make_the_question(index):
    index.page.select_option("#deployment", "offload")
    shown = index.rows()
    data = {row["id"]: row for row in index.data()["rows"]}
    assert len(shown) == 1 and data[shown[0]["id"]]["deployment"] == "offload" and shown[0]["rank"].startswith("1")
    index.page.select_option("#deployment", "")
    index.page.select_option("#model", "pi0")
    published = index.rows()
    assert published and all(data[row["id"]]["provenance"] == "reported" for row in published)
    index.page.uncheck("#prov-reported")
    assert index.rows() == [] and index.page.text_content("#answer").startswith("No row answers pi0")
    index.page.check("#prov-reported")
    index.page.select_option("#model", MEASURED_MODEL)


def test_columns_sort_on_click(index):
    data = {row["id"]: row for row in index.data()["rows"]}
    header = index.page.locator("#leaderboard button[data-key='latency_p50_ms']")
    header.click()
    ascending = [data[row["id"]]["latency_p50_ms"] for row in index.rows()]
    assert ascending == sorted(ascending)
    header.click()
    descending = [data[row["id"]]["latency_p50_ms"] for row in index.rows()]
    assert descending == sorted(descending, reverse=True)
    index.page.locator("#leaderboard button[data-key='device']").click()
    devices = [data[row["id"]]["device"] for row in index.rows()]
    assert devices == sorted(devices) and index.page.locator("th[aria-sort='ascending']").count() == 1
    index.page.select_option("#priority", "time")  # a new priority shows the ranking again
    assert index.rows()[0]["rank"].split()[0] == "1"
    assert all(row["rank"] for row in index.rows())  # never an empty # cell: a rank, or "—" when unranked
    index.page.select_option("#priority", "cost")


def test_an_offload_row_ranks_beside_on_robot_rows_with_the_servers_hour_shared(index, built, table, results_dir):
    """The offload row is ranked with the measured rows, on the latency its robots saw, its cost the page's own
    computation (the server's hour shared by four robots, one inference per two of their requests) equal to
    Python's; its device cell says so and its run page splits the robots' latency."""
    offload = next(row for row in table if row["deployment"] == "offload")
    served = json.loads((results_dir / "offload.json").read_text())["serving"]
    assert offload["robots"] == 4 and offload["latency_p50_ms"] == pytest.approx(served["latency"]["p50"])
    assert offload["rank"] is not None and offload["offload_server"].startswith("10.0.0.2:50051")
    on_robot = next(
        row
        for row in table
        if row["run_id"] != offload["run_id"]
        and row["backend"] == "torch"
        and row["deployment"] == "on-robot"
        and row["device"] == "generic-x86-cpu"
    )
    # the same device and energy measurement: per robot, the offload row's hardware is a quarter of the hour
    assert offload["usd_per_million_actions"] < on_robot["usd_per_million_actions"]
    row = index.page.locator(f"#row-{offload['id']}")
    assert "offload ×4 via 10.0.0.2:50051 (gpu-server)" in row.inner_text()
    # the page's own cost (leaderboard.js, at the page's default settings: those of the download) is Python's
    assert row.locator(".cost").inner_text() == f"{offload['usd_per_million_actions']:.4g}"
    assert row.locator(".hour").inner_text() == f"${offload['usd_per_robot_hour']:.3g}"
    assert "gated per step, as its robots asked" in row.locator(".status").inner_text()
    run_page = next(p for p in (built[1] / "runs").glob("*.html") if offload["run_id"] in p.read_text())
    visit = Visit(index.page.context.browser, built[1], f"runs/{run_page.name}")
    visit.check_clean()
    split = visit.page.locator("table.serving-split").inner_text()
    assert all(part in split for part in ("whole request", "encode", "network", "server decode", "queue", "inference"))
    visit.page.close()


def test_detail_pages_in_the_browser(browser, built, table):
    site = built[1]
    torch_run = next(
        r
        for r in table
        if r["run_id"]
        and r["backend"] == "torch"
        and r["device"] == "generic-x86-cpu"
        and r["optimizations"] == "none"
        and r["model"] == "smolvla-tiny"
        and r["deployment"] == "on-robot"
    )
    run_page = next(p.name for p in (site / "runs").glob("*.html") if torch_run["run_id"] in p.read_text())
    for name, relative in (
        ("run", f"runs/{run_page}"),
        ("model", f"models/{slug(XSS_MODEL)}.html"),  # a model page whose name is a script: rendered as text
        ("device", f"devices/{slug('generic-x86-cpu')}.html"),
    ):
        visit = Visit(browser, site, relative)
        visit.check_clean()
        assert visit.page.locator(".js-plotly-plot").count() >= 1  # roofline / phase chart drawn
        if name == "model":
            assert visit.page.text_content("h1") == f"Model {XSS_MODEL}"
        visit.screenshot(name)
        visit.page.close()
