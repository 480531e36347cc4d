"""The leaderboard site built from a real result of every model family (the tiny variants), checked in Chromium:
every model and run page renders with content of its own family and nothing shows None or undefined."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.paths import ROOT
from tests.support.site import Tab
from vlabench.cli.app import app
from vlabench.commands.run import execute, plan_run
from vlabench.leaderboard_site.rows import slug
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.results.schema import write_result

FLOW_VLA = {"vision tower", "language model", "action expert", "action head"}
FAMILIES = {
    # tiny model: (family, the Shapes blocks its page shows, how its action loop is described)
    "smolvla-tiny": ("smolvla", FLOW_VLA, "flow matching, Euler"),
    "pi0-tiny": ("pi0", FLOW_VLA, "flow matching, Euler"),
    "pi05-tiny": ("pi05", FLOW_VLA, "flow matching, Euler"),
    "gr00t-n1.5-tiny": (
        "gr00t",
        {
            "vision tower",
            "language model",
            "VL self-attention adapter",
            "action DiT",
            "embodiment heads",
            "action head",
        },
        "flow matching, Euler",
    ),
    "openvla-7b-tiny": ("openvla", {"vision towers", "language model", "action head"}, "greedy autoregressive"),
    "openvla-oft-tiny": ("openvla-oft", {"vision towers", "language model", "action head"}, "one forward pass"),
    "pi0-fast-tiny": ("pi0-fast", {"vision tower", "language model", "action head"}, "greedy autoregressive"),
    "act-tiny": ("act", {"image backbone", "transformer", "action head"}, "one forward pass"),
    "diffusion-policy-tiny": (
        "diffusion-policy",
        {"image backbone", "spatial-softmax keypoints per camera", "observation frames", "1-D U-Net", "action head"},
        "DDPM denoising",
    ),
}
MISSING_VALUE = re.compile(r"\b(None|Undefined|undefined|nan|NaN|null)\b")
RAW_FLOAT = re.compile(r"\d\.0*[1-9]\d{8,}")
"""A float printed with 10 or more significant digits, as Python stores it (``3.5999999999999996``): run pages
format every figure."""
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
runner = CliRunner()


@pytest.fixture(scope="module")
def results(fast_run, tmp_path_factory) -> dict[str, Path]:
    """One real `vlabench run` result per tiny model, i.e. per family."""
    folder = tmp_path_factory.mktemp("family-results")
    written = {}
    for model in FAMILIES:
        config = fast_run.config(model=model, energy_meter="estimated", energy_window_s=1.0, idle_window_s=0.1)
        written[model] = write_result(execute(plan_run(config)), folder)
    return written


@pytest.fixture(scope="module")
def site(results, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("family-site") / "site"
    folder = next(iter(results.values())).parent
    # a 1 Hz question: every tiny run keeps up however loaded the machine that timed it (each one ranks)
    built = runner.invoke(app, ["site", "build", str(folder), "-o", str(out), "--control-hz", "1"])
    assert built.exit_code == 0, built.output
    assert "Traceback" not in built.output and "skipped" not in built.output
    return out


def test_the_results_cover_every_family():
    families = {load_model_spec(model).family for model in FAMILIES}
    assert families == {family for family, _, _ in FAMILIES.values()}
    assert families == {load_model_spec(name).family for name in _model_names()}


def _model_names() -> list[str]:
    from vlabench.models.specs import model_names

    return model_names()


@pytest.fixture(scope="module")
def tab(browser, site):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    yield Tab(page, site)
    page.close()


def test_the_index_answers_every_model(tab):
    """Each family's run is its own question: the model is offered, its run ranks first in its question, links to its
    run page, and nothing reads None, undefined or NaN."""
    visit = tab.open("index.html")
    visit.page.wait_for_selector("body[data-ready]")
    visit.check_clean()
    rows = [row for row in visit.data()["rows"] if row["kind"] == "run"]
    assert sorted(row["model"] for row in rows) == sorted(FAMILIES)
    for row in rows:
        assert row["valid"] and row["action_error"] is None and row["invalid_reason"] is None  # fp32 reference
        visit.page.select_option("#model", row["model"])
        visit.page.wait_for_selector(f"#leaderboard tr[data-id='{row['id']}']")  # the table redraws after the change
        shown = visit.rows()
        assert [cell["id"] for cell in shown] == [row["id"]], (row["model"], shown)
        assert shown[0]["rank"].startswith("1")
        link = visit.page.locator(f"#leaderboard tr[data-id='{row['id']}'] a[href='{row['page']}']")
        assert link.count() == 1 and row["page"] == f"runs/{row['id']}.html"
        text = visit.page.inner_text("#leaderboard") + visit.page.text_content("#answer")
        assert not MISSING_VALUE.search(text), (row["model"], MISSING_VALUE.search(text))


@pytest.mark.parametrize("model", list(FAMILIES))
def test_model_and_run_pages_show_their_family(tab, site, results, model):
    family, blocks, action_loop = FAMILIES[model]
    spec = load_model_spec(model)
    backbone, action_head = spec.summary
    workload = Workload.from_spec(spec)
    visit = tab.open(f"models/{slug(model)}.html")
    visit.check_clean()
    assert visit.page.text_content("h1") == f"Model {model}"
    text = visit.page.inner_text("main")
    assert f"({family} family)" in text
    facts = visit.page.inner_text("table.facts")
    assert backbone in facts and action_head in facts and action_loop in facts
    assert f"{workload.chunk} action" in facts and f"{workload.actions_per_chunk} executed" in facts
    shapes = visit.page.eval_on_selector_all(
        "h2:text('Shapes') + table.kv > tbody > tr > th", "ths => ths.map(th => th.textContent)"
    )
    assert set(shapes) == blocks
    assert not MISSING_VALUE.search(text), MISSING_VALUE.search(text)
    assert visit.page.locator(".js-plotly-plot").count() == 1  # the phase breakdown of its run
    run_page = visit.page.locator("a[href^='../runs/']").first.get_attribute("href").removeprefix("../")
    run = tab.open(run_page)
    run.check_clean()
    assert run.page.text_content("h1").startswith(f"{model} on ")
    text = run.page.inner_text("main")
    assert "Latency per phase" in text and "never ranked" not in text
    assert not MISSING_VALUE.search(text), MISSING_VALUE.search(text)
    assert not RAW_FLOAT.search(text), RAW_FLOAT.search(text)
    assert "CET assumptions" in text and "reaction delay (p99 latency)" in text and " Hz at p50" in text
    drawn = run.page.locator("div.plot[data-chart^='phases-run-'].js-plotly-plot")
    assert drawn.count() == 1  # the run's own phase breakdown
    if model == "pi0-tiny":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        run.page.screenshot(path=str(SCREENSHOTS / "run-page.png"), full_page=True)
    raw = run.page.locator("a", has_text="raw result JSON").get_attribute("href")
    assert (site / "runs" / raw).read_bytes() == results[model].read_bytes()
