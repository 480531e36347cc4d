"""The leaderboard answers one question at a time, in Chromium: each of the issue's questions answered from the page
alone within three interactions from the landing page, and checked against ``vlabench rank`` on the same question;
the page's ranks equal the JSON download's; the address holds every control; keyboard use, contrast and phone width.

The site is built from the bundled results (SmolVLA and ACT on this CPU: on-robot, served, offload), the H200 device
check's SmolVLA runs (one H200 serving 8 robots, and on-robot), the published rows, and hand-built projections
(figures invented for the test, labelled projected as the row contract requires; the projection model's own fit is
slow the first time and is tested in test_projection.py)."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.paths import ROOT
from tests.support.site import projected_row
from vlabench.cli.app import app
from vlabench.leaderboard_site import board as site_board
from vlabench.leaderboard_site.board import bundled_inputs
from vlabench.leaderboard_site.build import build_site
from vlabench.leaderboard_site.rows import slug

H200 = ROOT / "benchmarks" / "results" / "device-check" / "h200-2026-12-04" / "call1" / "results"
H200_RUNS = sorted((H200 / "run_smolvla_base").glob("*.json")) + sorted((H200 / "run_smolvla_serving").glob("*.json"))
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
runner = CliRunner()


def _projected(model, device, kind, stack, e2e, band, price, cameras, **extra):
    """A projection of ``model`` on ``device`` with a band and a price, on a larger card than ``projected_row``'s."""
    return projected_row(
        device, e2e, price, model=model, device_kind=kind, stack=stack, error_band=band, cameras=cameras,
        memory_needed_gb=4.0, usable_memory_gb=60.0, joules_per_inference=e2e * 0.02, idle_w=5.0, **extra,
    )  # fmt: skip


PROJECTED = [
    _projected("smolvla", "jetson-agx-orin-64gb", "soc", "tensorrt", 30.0, 0.26, 1999.0, 1),
    _projected("smolvla", "jetson-orin-nano-8gb", "soc", "pytorch-eager", 70.0, 0.31, 249.0, 1),
    _projected("smolvla", "h100-sxm", "gpu", "pytorch-eager", 12.0, 0.31, 30000.0, 1),
    _projected("pi0", "jetson-thor", "soc", "tensorrt", 80.0, 0.26, 3499.0, 3),
    _projected("pi0", "jetson-agx-orin-64gb", "soc", "tensorrt", 95.0, 0.26, 1999.0, 3),
    _projected("pi0", "jetson-orin-nx-16gb", "soc", "pytorch-eager", 600.0, 0.31, 899.0, 3),
    _projected(
        "pi0",
        "h100-sxm",
        "gpu",
        "jax",
        20.0,
        0.02,
        30000.0,
        3,
        uncalibrated=True,
        band_coverage=0.81,
        band_basis="every entry",
    ),
]
INPUTS = [*bundled_inputs(), *H200_RUNS]


@pytest.fixture(scope="module")
def patched():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(site_board, "projections", lambda progress=None: PROJECTED)
        patch.setattr(site_board, "reported_energies", lambda entries: {})
        yield


@pytest.fixture(scope="module")
def site(patched, tmp_path_factory):
    out = tmp_path_factory.mktemp("question-site") / "site"
    build_site(INPUTS, out, projected=True)
    return out


@pytest.fixture(scope="module")
def tab(browser, site):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.requests, page.errors = requests, errors
    yield page
    page.close()


def _land(tab, site: Path, fragment: str = "") -> None:
    """Open the landing page afresh (a fragment only where the test is about the address)."""
    tab.goto("about:blank")
    tab.requests.clear()
    tab.goto((site / "index.html").as_uri() + fragment)
    tab.wait_for_selector("body[data-ready]")


def _rank(patched, *args) -> list[dict]:
    """``vlabench rank`` on the same inputs (the published and projected rows added), as JSON."""
    result = runner.invoke(app, ["rank", *map(str, INPUTS), "--published", "--projected", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _table(tab) -> list[dict]:
    return tab.eval_on_selector_all(
        "#leaderboard tbody tr",
        """trs => trs.map(tr => ({id: tr.dataset.id, rank: tr.querySelector('.rank').textContent,
            device: tr.querySelector('.device').textContent, stack: tr.querySelector('.stack').textContent,
            name: tr.querySelector('.device a:not(.permalink)').textContent,
            hour: tr.querySelector('.hour').textContent, provenance: tr.querySelector('.provenance').textContent,
            status: tr.querySelector('.status').textContent, infeasible: tr.classList.contains('infeasible')}))""",
    )


def _hour(row: dict) -> str:
    """The $ per robot-hour cell of a row ``vlabench rank`` returned, as the page writes it."""
    full, electricity = row["usd_per_robot_hour"], row["usd_per_robot_hour_electricity_only"]
    if row["cost_basis"] != "electricity-only" and full is not None:
        return f"${full:.3g}"
    return "—" if electricity is None else f"${electricity:.3g} elec. only"


def _rank_text(row: dict) -> str:
    """The # cell's rank of a row ``vlabench rank`` returned, as the page writes it: ``3``, ``3=`` or ``—``."""
    return "—" if row["rank"] is None else f"{row['rank']}{'=' if row['tied'] else ''}"


def _winners(rows: list[dict]) -> list[dict]:
    return [row for row in rows if row["rank"] == 1 and row["group"] == "exact"]


def _says(answer: str, row: dict) -> bool:
    return f"{row['device']}" in answer and f"{row['backend']} {row['precision']}" in answer


def test_the_landing_page_is_light_and_clean(tab, site):
    _land(tab, site)
    assert tab.errors == []
    assert all(url.startswith(site.resolve().as_uri()) for url in tab.requests), tab.requests
    assert not any("plotly" in url for url in tab.requests)  # plotly.js waits until the charts come into view
    first_screen = sum((site / url.removeprefix(site.resolve().as_uri() + "/")).stat().st_size for url in tab.requests)
    assert first_screen < 1_000_000
    assert "leaderboard-data" not in (site / "index.html").read_text()  # no inline rows
    tab.evaluate("document.getElementById('charts').scrollIntoView()")
    tab.wait_for_function("document.querySelectorAll('#charts .js-plotly-plot').length === 3")
    assert any(url.endswith("plotly-basic.min.js") for url in tab.requests)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SCREENSHOTS / "question-landing.png"), full_page=True)


def test_cheapest_device_per_robot_hour_for_smolvla_at_10_hz(tab, site, patched):
    """One interaction: the model (SmolVLA); 10 Hz per step at p99 is the default question."""
    _land(tab, site)
    tab.select_option("#model", "smolvla")
    answer = tab.text_content("#answer")
    expected = _winners(_rank(patched, "--model", "smolvla", "--control-hz", "10"))
    assert expected and answer.startswith(
        "Cheapest per robot-hour for smolvla (1 camera · 10 steps · 48 prompt tokens)"
    )
    assert "at 10 Hz per step" in answer and _says(answer, expected[0]), (answer, expected[0])
    top = _table(tab)[0]
    assert top["rank"].startswith("1") and expected[0]["device"] in top["device"]
    assert top["hour"] == _hour(expected[0]) == f"${expected[0]['usd_per_robot_hour']:.3g}"
    assert f"{top['hour']} per robot-hour" in answer


def test_fastest_jetson_for_pi0(tab, site, patched):
    """Three interactions: the model, the device class, the priority."""
    _land(tab, site)
    tab.select_option("#model", "pi0")
    tab.select_option("#device-class", "jetson")
    tab.select_option("#priority", "time")
    answer = tab.text_content("#answer")
    expected = _winners(_rank(patched, "--model", "pi0", "--device-class", "jetson", "--priority", "time"))
    # Thor at 80 ms first; AGX Orin's 95 ms is within the ±26% bands: not ranked apart, said in one sentence
    assert [row["device"] for row in expected] == ["jetson-thor", "jetson-agx-orin-64gb"]
    assert answer.startswith("Fastest for pi0 (3 cameras · 10 steps · 48 prompt tokens), jetson devices")
    assert _says(answer, expected[0]) and "80 ms (projected latency, no p99)" in answer
    assert "2 rows (2 devices) share rank 1: equal figures or overlapping bands" in answer
    rows = _table(tab)
    assert {row["name"] for row in rows} <= {"jetson-thor", "jetson-agx-orin-64gb", "jetson-orin-nx-16gb"}
    shown = {row["id"]: row for row in rows}
    ranked = _rank(patched, "--model", "pi0", "--device-class", "jetson", "--priority", "time")
    for row in ranked:  # every rank and tie on the page is rank's
        text = shown[row["id"]]["rank"]
        assert text.split()[0] == _rank_text(row), row["id"]
    orin = next(row for row in rows if "jetson-agx-orin-64gb" in row["device"])
    assert orin["rank"].startswith("1=") and "within the ±26% band of jetson-thor (tensorrt)" in orin["status"]


def test_one_datacenter_gpu_serving_robots_against_one_jetson_per_robot(tab, site, patched):
    """One interaction from the landing page (SmolVLA, the model with the most measured rows): the control rate at
    which the served H200 keeps up (1 Hz); the page ranks it beside the Jetsons, per robot-hour."""
    _land(tab, site)
    assert tab.input_value("#model") == "smolvla"
    tab.fill("#control-hz", "1")
    if tab.is_visible("#show-all"):
        tab.click("#show-all")
    rows = _table(tab)
    ranked = {row["id"]: row for row in _rank(patched, "--model", "smolvla", "--control-hz", "1")}
    served = next(row for row in rows if "served ×8" in row["device"] and "h200" in row["device"])
    jetsons = [row for row in rows if "jetson" in row["device"]]
    assert jetsons and "8 robots served by one instance" in served["status"]
    for row in [served, *jetsons]:
        expected = ranked[row["id"]]
        assert row["hour"] == _hour(expected), row["device"]
        assert row["rank"].split()[0] == _rank_text(expected)
    costed = [row for row in jetsons if ranked[row["id"]]["usd_per_robot_hour"] is not None]
    cheapest = min(costed, key=lambda row: ranked[row["id"]]["usd_per_robot_hour"])
    served_cost = ranked[served["id"]]["usd_per_robot_hour"]
    assert served_cost is not None and not served["infeasible"]
    served_first = served_cost < ranked[cheapest["id"]]["usd_per_robot_hour"]
    assert served_first == (int(served["rank"].split()[0].rstrip("=")) < int(cheapest["rank"].split()[0].rstrip("=")))


def test_how_sure_a_projected_row_is(tab, site, patched):
    """Two interactions: search for the row, open it (its permalink opens its question)."""
    _land(tab, site)
    tab.fill("#search", "pi0 h100 jax")
    tab.click("#search-results a")
    row_id = re.search(r"row-(\S+)", tab.evaluate("document.querySelector('tr.target').id")).group(1)
    row = next(r for r in _table(tab) if r["id"] == row_id)
    assert row["provenance"] == "projected ±2% uncalibrated coverage 81% (every entry)"
    expected = next(r for r in _rank(patched, "--model", "pi0") if r["id"] == row_id)
    assert expected["error_band"] == 0.02 and expected["calibration"] == "uncalibrated"
    assert expected["band_coverage"] == 0.81
    assert tab.input_value("#model") == "pi0" and "how to read this" in tab.inner_text("main").lower()
    assert "sources held out of the fit" in tab.inner_text(".explain")
    plain = next(r for r in _table(tab) if "jetson-thor" in r["device"] and "tensorrt" in r["stack"])
    assert plain["provenance"] == "projected ±26%"


def test_the_page_ranks_every_question_as_the_json_download(tab, site):
    table = json.loads((site / "leaderboard.json").read_text())["rows"]
    assert all(row["question"] for row in table)
    for model in ("smolvla", "pi0", "act"):
        _land(tab, site, f"#model={model}&all=1")
        shown = {row["id"]: row["rank"].split()[0] for row in _table(tab)}
        question = tab.text_content("#ranking-title").split(", ", 1)[1]
        expected = {
            row["id"]: _rank_text(row) for row in table if row["model"] == model and row["question"].endswith(question)
        }
        assert shown == expected, model


def test_every_control_is_in_the_address(tab, site):
    _land(tab, site)
    tab.select_option("#model", "pi0")
    tab.select_option("#execution", "async")
    tab.fill("#chunk-n", "10")
    tab.fill("#duty", "80")
    tab.uncheck("#prov-reported")
    address, answer = tab.evaluate("location.hash"), tab.text_content("#answer")
    for part in ("model=pi0", "exec=async", "n=10", "duty=80", "reported=0"):
        assert part in address, address
    _land(tab, site, address)
    assert tab.text_content("#answer") == answer and tab.input_value("#execution") == "async"
    assert not tab.is_checked("#prov-reported")


def test_keyboard_only(tab, site):
    """Every control and sort header is reached with Tab, sorting works with Enter, and the charts come before the
    hundredth tab stop."""
    _land(tab, site)
    stops = []
    for _ in range(150):
        tab.keyboard.press("Tab")
        stops.append(tab.evaluate("[document.activeElement.id, document.activeElement.dataset.key || '']"))
    ids = [stop[0] for stop in stops]
    for control in ("model", "workload", "control-hz", "execution", "priority", "device-class", "search", "duty"):
        assert control in ids, control
    keys = [stop[1] for stop in stops]
    assert "latency_p50_ms" in keys and keys.index("latency_p50_ms") < 100
    tab.focus("#leaderboard button[data-key='latency_p50_ms']")
    tab.keyboard.press("Enter")
    values = [float(v) for v in tab.eval_on_selector_all("#leaderboard td.p50", "tds => tds.map(td => td.textContent)")]
    assert values == sorted(values)
    assert tab.get_attribute("#leaderboard th:has(button[data-key='latency_p50_ms'])", "aria-sort") == "ascending"


CONTRAST = """() => {
  const lum = (rgb) => {
    const [r, g, b] = rgb.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const parse = (s) => s.match(/[\\d.]+/g).map(Number);
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = parse(getComputedStyle(el).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const failures = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!node.textContent.trim() || !el.getClientRects().length || el.closest('.js-plotly-plot, [hidden]')) continue;
    const style = getComputedStyle(el);
    const [a, b] = [lum(parse(style.color).slice(0, 3)), lum(background(el))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const size = parseFloat(style.fontSize);
    const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
    if (ratio < (large ? 3 : 4.5)) failures.push([node.textContent.trim().slice(0, 40), ratio.toFixed(2)]);
  }
  return failures;
}"""


def test_text_meets_wcag_aa_contrast_and_pages_fit_a_phone(browser, site):
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    table = json.loads((site / "leaderboard.json").read_text())["rows"]
    served = next(row for row in table if row["deployment"] == "served" and row["model"] == "smolvla")
    pages = ["index.html", f"devices/{slug('h200')}.html", f"models/{slug('pi0')}.html", f"runs/{served['id']}.html"]
    for relative in pages:
        phone.goto((site / relative).as_uri())
        phone.wait_for_load_state("load")
        if relative == "index.html":
            phone.wait_for_selector("body[data-ready]")
            phone.uncheck("#prov-projected")  # measured and published rows: greyed infeasible ones among them
            assert phone.locator("#leaderboard tr.infeasible").count() > 0
            assert phone.evaluate(CONTRAST) == []
            phone.evaluate("document.getElementById('charts').scrollIntoView()")
            phone.wait_for_function("document.querySelectorAll('#charts .js-plotly-plot').length === 3")
            for model in ("pi0", "smolvla"):  # their workloads' long names, their charts
                phone.select_option("#model", model)
                assert phone.evaluate("document.documentElement.scrollWidth") <= 390, model
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390, relative
        assert phone.evaluate(CONTRAST) == [], relative
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    phone.screenshot(path=str(SCREENSHOTS / "question-run-390px.png"), full_page=False)
    phone.close()
