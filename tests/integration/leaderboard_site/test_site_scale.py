"""The size budgets of the leaderboard site, on synthetic results (``benchmarks/site_scale.py``: one real result file
copied into seeded variations; no benchmark runs). Build times are printed by that script, never asserted here.

Budgets: each result costs at most 20 kB beyond its own JSON file (published as it is): its run page, its chart and
its share of the index, model and device pages; the fixed part (plotly.js, the other assets, the pages of published
rows) at most 6 MB; the index at most 50 kB whatever the rows (they reach it as data), and its data (gzipped,
base64) at most 300 bytes per leaderboard row; no page over 1 MB; every chart written once, as
a file of its own without plotly's template (the pages share ``assets/plot-template.js``); a device page draws at
most one roofline per model and points to the run pages' charts instead of copying them."""

import re
from pathlib import Path

import pytest

from tests.support.hostile import site_scale
from vlabench.leaderboard_site.build import build_site
from vlabench.leaderboard_site.pages import DEVICE_ROOFLINES

RESULTS = 300
PER_RESULT_BYTES = 20_000
FIXED_BYTES = 6_000_000
INDEX_BYTES = 50_000
DATA_BYTES_PER_ROW = 300
PAGE_BYTES = 1_000_000
CHART_BYTES = 20_000


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site-scale")
    paths = site_scale.synthetic_results(folder / "results", RESULTS, seed=1)
    report = build_site([folder / "results"], folder / "site")
    assert report.runs == RESULTS and report.skipped == []
    return report, folder / "site", paths


def _size(path: Path) -> int:
    return path.stat().st_size


def test_the_site_costs_at_most_20_kb_per_result_beyond_its_file(built):
    _, site, paths = built
    own_json = sum(_size(p) for p in paths)
    total = sum(_size(p) for p in site.rglob("*") if p.is_file())
    assert total <= own_json + PER_RESULT_BYTES * RESULTS + FIXED_BYTES, (total, own_json)
    published = sum(_size(p) for p in (site / "runs").glob("*.json"))
    assert published == own_json  # the result files as they are


def test_no_page_is_over_1_mb_and_the_index_stays_small(built):
    report, site, _ = built
    pages = {p: _size(p) for p in site.rglob("*.html")}
    assert max(pages.values()) <= PAGE_BYTES, max(pages, key=pages.get)
    assert pages[site / "index.html"] <= INDEX_BYTES  # no inline rows: the page loads them
    assert _size(site / "data" / "board.js") <= DATA_BYTES_PER_ROW * report.rows


def test_every_chart_is_a_file_of_its_own_without_a_template(built):
    _, site, _ = built
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "Plotly.newPlot" not in text and '"template"' not in text, page
        for name in re.findall(r'src="(?:\.\./)*charts/([^"]+)\.js"', text):
            assert (site / "charts" / f"{name}.js").is_file(), (page, name)
    charts = list((site / "charts").glob("*.js"))
    assert len(charts) >= RESULTS  # one roofline per run, plus the index and model charts
    for chart in charts:
        text = chart.read_text()
        assert '"template"' not in text and "<" not in text, chart
        assert _size(chart) <= CHART_BYTES or not chart.name.startswith("roofline-"), chart  # a run's chart is small
    assert (site / "assets" / "plot-template.js").read_text().startswith("window.VLABENCH_TEMPLATE = {")


def test_a_device_page_draws_one_roofline_per_model_from_the_run_charts(built):
    _, site, _ = built
    biggest = max((site / "devices").glob("*.html"), key=_size)
    text = biggest.read_text()
    rows = text.count('<a href="../runs/')
    drawn = re.findall(r'data-chart="(roofline-[^"]+)"', text)
    models = set(re.findall(r"<h3><a href=\"\.\./runs/[^\"]+\">([^<]+) · ", text))
    assert 0 < len(drawn) == len(models) <= DEVICE_ROOFLINES and rows > 2 * len(drawn)
    assert _size(biggest) <= 60_000 + 1_000 * rows
