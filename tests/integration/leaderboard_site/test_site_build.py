"""The CET leaderboard site built from real `vlabench run` results plus hand-written edge cases, checked in Python
(the browser tests are tests/browser/)."""

import json
import re
import threading
import urllib.request

import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.support.site import MEASURED_MODEL, TARGET_HZ, XSS_DEVICE, XSS_MODEL, board_data, case_run_id, python_order
from vlabench.cli.app import app
from vlabench.errors import InputError
from vlabench.leaderboard_site import build as site_build
from vlabench.leaderboard_site.build import MARKER, build_site
from vlabench.leaderboard_site.estimates import reported_id
from vlabench.leaderboard_site.reported import reported_entries
from vlabench.leaderboard_site.rows import slug
from vlabench.leaderboard_site.serve import make_server
from vlabench.vocab import Precision

runner = CliRunner()


def test_bad_files_are_skipped_with_a_warning(built, results_dir, tmp_path):
    report, site = built
    assert report.runs == 7  # two real runs, five derived: cheap, dp-cache, xss, invalid, offload
    assert len(report.skipped) == 2
    assert any("broken.json" in s and "not valid JSON" in s for s in report.skipped)
    assert any("foreign.json" in s for s in report.skipped)
    index = (site / "index.html").read_text()
    assert "Skipped input files" in index and "broken.json" in index
    assert json.loads((site / MARKER).read_text())["skipped"] == report.skipped
    result = runner.invoke(app, ["site", "build", str(results_dir), "-o", str(tmp_path / "cli-site")])
    assert result.exit_code == 0, result.output
    assert "skipped" in result.output and "broken.json" in result.output
    assert (tmp_path / "cli-site" / "index.html").is_file()


def test_no_readable_result_is_a_clear_error(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "broken.json").write_text("{")
    result = runner.invoke(app, ["site", "build", str(tmp_path / "in"), "-o", str(tmp_path / "site")])
    assert result.exit_code == 2 and "no readable results" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "site").exists()


def test_names_from_results_are_escaped_everywhere(built, table):
    _, site = built
    pages = list(site.rglob("*.html"))
    assert len(pages) > 10
    for page in pages:
        text = page.read_text()
        assert XSS_MODEL not in text and XSS_DEVICE not in text, page
    model_page = (site / "models" / f"{slug(XSS_MODEL)}.html").read_text()
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in model_page
    packed = (site / "data" / "board.js").read_text()
    assert re.fullmatch(r'window\.VLABENCH_BOARD = "[A-Za-z0-9+/=]+";\n', packed)  # base64: nothing to inject
    rows = board_data(site)["rows"]
    assert XSS_MODEL in {row["model"] for row in rows} and XSS_DEVICE in {row["device"] for row in rows}
    assert XSS_MODEL in {row["model"] for row in table}


def test_downloads_hold_the_ranked_table(built, table, results_dir):
    _, site = built
    runs = [row for row in table if row["provenance"] != "reported"]
    reported = [row for row in table if row["provenance"] == "reported"]
    assert len(runs) == 7 and len(reported) == len(reported_entries()) > 0
    order, infeasible = python_order(results_dir, "cost", TARGET_HZ)
    measured = [row for row in runs if row["model"] == MEASURED_MODEL]
    assert [row["run_id"] for row in measured if row["rank"] is not None] == order
    assert {row["run_id"] for row in measured if not row["feasible"]} == infeasible
    xss = next(row for row in runs if row["model"] == XSS_MODEL)
    assert xss["rank"] == 1 and xss["question"].startswith(XSS_MODEL)  # a question of its own, never ranked with others
    invalid = next(row for row in runs if row.get("run_id") == case_run_id(results_dir, "invalid"))
    assert invalid["rank"] is None and invalid["feasible"] is False and invalid["valid"] is False
    assert "failed the correctness gate" in invalid["reasons"]
    cheap = next(row for row in runs if row.get("run_id") == case_run_id(results_dir, "cheap"))
    assert cheap["rank"] == 1 and cheap["usd_per_million_actions"] > 0
    # published rows: cited, gated, and without the projection model's energy estimate not ranked by cost
    assert all(row["source"] and row["rank"] is None for row in reported)
    assert all(
        row["group"] == ("approximate" if Precision.is_quantized(row["precision"]) else "exact") for row in reported
    )
    assert any(row["feasible"] for row in reported) and not all(row["feasible"] for row in reported)
    energies = {row["device"]: row["published_energy_kj"] for row in reported if row["published_energy_kj"]}
    assert energies == {
        "rtx-4090": 2.398,
        "jetson-thor": 1.282,
        "jetson-agx-orin-64gb": 1.866,
        "arc-pro-b60": 6.363,
        "ascend-310p": 2.618,
    }
    assert {row["provenance"] for row in runs} == {"estimated"}  # the fixture's energy is estimated
    csv = pd.read_csv(site / "leaderboard.csv")
    assert list(csv.columns) == list(table[0])
    assert list(csv["model"]) == [row["model"] for row in table]
    assert csv["latency_p50_ms"].tolist() == pytest.approx([row["latency_p50_ms"] for row in table])


def test_reported_energies_join_one_published_latency_each():
    entries = [entry for entry in reported_entries() if entry.energy is not None]
    assert len(entries) == 5
    for entry in entries:
        assert entry.latency.model == "pi0" and entry.latency.steps == 4 and entry.latency.stack == "pytorch-eager"
        assert "Table 1" in entry.energy.source and entry.latency.label == "reported"


def test_every_published_row_has_its_own_id():
    """Two figures of one model, device and stack (another camera count, another publication) are two rows."""
    entries = reported_entries()
    ids = [reported_id(entry) for entry in entries]
    assert len(set(ids)) == len(ids) == len(entries)
    same = [
        e
        for e in entries
        if (e.latency.model, e.latency.device, e.latency.stack) == ("pi0", "rtx-5090", "tuned-kernels")
    ]
    assert len({(e.latency.cameras, e.latency.precision) for e in same}) == len(same) > 1


def test_detail_pages(built, table):
    _, site = built
    torch_row = next(
        row
        for row in table
        if row["backend"] == "torch"
        and row["optimizations"] == "none"
        and row["model"] == "smolvla-tiny"
        and row["device"] == "generic-x86-cpu"
        and row["deployment"] == "on-robot"
    )
    run_page = next(p for p in (site / "runs").glob("*.html") if torch_row["run_id"] in p.read_text())
    text, stem = run_page.read_text(), run_page.name.removesuffix(".html")
    assert f'href="{stem}.trace.json"' in text and (site / "runs" / f"{stem}.trace.json").is_file()
    assert json.loads((site / "runs" / f"{stem}.json").read_text())["run_id"] == torch_row["run_id"]
    assert "lifetime_years" in text and "git_revision" in text and "p99 ms" in text
    assert "Cold start: the first action after" in text and "the backend prepared in" in text and "(load " in text
    assert "window(s) of" in text and "input pipeline (preprocess, postprocess) timed" in text
    tiny = (site / "models" / f"{slug('smolvla-tiny')}.html").read_text()
    assert "Phase breakdown" in tiny and "Shapes" in tiny and "heads" in tiny
    assert "No model spec named" in (site / "models" / f"{slug(XSS_MODEL)}.html").read_text()
    pi0 = (site / "models" / f"{slug('pi0')}.html").read_text()
    assert "arXiv 2604.24447" in pi0 and "badge-reported" in pi0
    pi5 = (site / "devices" / f"{slug('raspberry-pi-5')}.html").read_text()
    assert "price USD" in pi5 and "Raspberry Pi 5" in pi5
    assert "Roofline, phases plotted" in (site / "devices" / f"{slug('generic-x86-cpu')}.html").read_text()


def test_build_is_atomic(built, results_dir, tmp_path, monkeypatch):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a vlabench site"):
        build_site([results_dir], precious)
    assert (precious / "notes.txt").read_text() == "keep me"
    target = tmp_path / "site"
    build_site([results_dir], target)
    before = (target / "index.html").read_text()

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(site_build, "write_downloads", explode)
    with pytest.raises(RuntimeError):
        build_site([results_dir], target)
    assert (target / "index.html").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious", "site"]  # no partial folder left


def test_serve_rejects_a_folder_that_is_not_a_site(built, tmp_path):
    result = runner.invoke(app, ["site", "serve", str(tmp_path)])
    assert result.exit_code == 2 and "not a built vlabench site" in result.output and "Traceback" not in result.output
    with pytest.raises(InputError):
        make_server(tmp_path / "missing")
    server = make_server(built[1], 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/index.html", timeout=10) as reply:
            assert reply.status == 200 and b"CET" in reply.read()
    finally:
        server.shutdown()
        server.server_close()
