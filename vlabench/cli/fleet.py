"""Fleet scale: ``vlabench sweep`` (locally or on Ray), ``worker`` (Ray resources), ``compare`` (regressions) and
``validate`` (publication checks)."""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from vlabench.cli.options import Bounds, arguments_for, contextual, number_option, run_option
from vlabench.cli.views.console import markup_safe, notes, stderr, stdout, warn_skipped, write_json
from vlabench.errors import CheckFailedError, InputError, InvalidResultError, SweepFailedError

# Bounds of the options below; sweep's and compare's match what their settings accept (sweep_file, results.compare).
TIMEOUT_S = Bounds(0.0, 7 * 86_400.0, open_below=True)
THRESHOLD = Bounds(0.0, 10.0, open_below=True)
CONFIDENCE = Bounds(0.0, 1.0, open_below=True, open_above=True)
RESAMPLES = Bounds(100, 20_000, integer=True)


def sweep(
    sweep_file: Annotated[
        Path, typer.Argument(metavar="SWEEP.yaml", help="Sweep file: fixed settings, a run-settings matrix, excludes.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the expanded runs in execution order.")] = False,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "-o", help=contextual("Results folder.", "the sweep file's out, else results")),
    ] = None,
    timeout_s: Annotated[
        float | None,
        number_option(TIMEOUT_S, "--timeout-s", help="Per-run limit, s; the run's process group is then killed."),
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray", metavar="ADDRESS", help="Dispatch the runs to this Ray cluster (HOST:PORT).")
    ] = None,
) -> None:
    """Run a matrix of benchmarks, each in a child process; resumable, locally or on a Ray cluster."""
    from vlabench.cli.views.sweep import SweepProgress, runs_table, summary_table
    from vlabench.fleet.local_runner import completed_keys, execute_sweep, run_locally
    from vlabench.fleet.sweep_file import expand, load_sweep

    spec = load_sweep(sweep_file)
    runs = expand(spec, str(sweep_file))
    results = out_dir or spec.out
    timeout = timeout_s if timeout_s is not None else spec.timeout_s
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout-s must be > 0, not {timeout:g}")
    done = completed_keys(results) & {run.key for run in runs}
    if dry_run:
        stdout.print(runs_table(runs, done, ray=ray_address is not None))
        return
    if ray_address:
        from vlabench.fleet.ray_dispatch import RAY_IN_FLIGHT, ray_launcher

        launching, in_flight = ray_launcher(ray_address, timeout, spec.max_retries), RAY_IN_FLIGHT
    else:
        launching, in_flight = nullcontext(run_locally(results, timeout)), 1
    started = time.monotonic()
    with launching as launcher, SweepProgress(stderr, len(runs) - len(done)) as progress:
        records = execute_sweep(runs, results, launcher, progress.started, progress.finished, in_flight)
    stdout.print(summary_table(records, time.monotonic() - started))
    stdout.print(f"results: [bold]{markup_safe(results)}[/]  journal: {markup_safe(results / '.sweep')}")
    if any(record.status == "failed" for record in records):
        stderr.print("[bold red]some runs failed[/] (reasons above); run the same command again to retry them")
        raise SweepFailedError
    if any(record.status == "invalid" for record in records):
        raise InvalidResultError


def worker(
    address: Annotated[
        str | None, typer.Option(help="The head node's HOST:PORT to join; without it, the line starts a head.")
    ] = None,
    port: Annotated[
        int, number_option(Bounds(1, 65_535, integer=True), help="Port of a head node started here.")
    ] = 6379,
    placement: Annotated[
        list[str] | None, typer.Option("--placement", help="Extra placement label to advertise (repeatable).")
    ] = None,
    detect: Annotated[bool, typer.Option(help="Advertise the device profiles detected on this host.")] = True,
    num_cpus: Annotated[
        int | None,
        number_option(Bounds(0, 100_000, integer=True), help=contextual("CPUs this node gives Ray.", "Ray's")),
    ] = None,
    start: Annotated[bool, typer.Option("--start", help="Run the `ray start` line now.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the resources as JSON.")] = False,
) -> None:
    """Print the `ray start` line that advertises this host's devices to a vlabench sweep (or run it)."""
    from vlabench.fleet.worker import detected_device_names, ray_start_command, shell_line, start_ray, worker_resources

    devices = [*(detected_device_names() if detect else []), *(placement or [])]
    if not devices:
        raise InputError("nothing to advertise: give --placement or drop --no-detect")
    resources = worker_resources(devices)
    command = ray_start_command(resources, address, port, num_cpus)
    if as_json:
        write_json(json.dumps({"resources": resources, "command": command}, indent=2))
    else:
        stdout.print(shell_line(command), highlight=False, soft_wrap=True)
    if start:
        code = start_ray(command)
        if code:
            raise typer.Exit(code)


def compare(
    ctx: typer.Context,
    baseline: Annotated[Path, typer.Argument(metavar="BASELINE_DIR", help="Results folder (or file) of reference.")],
    candidate: Annotated[Path, typer.Argument(metavar="CANDIDATE_DIR", help="Results folder (or file) to check.")],
    threshold: Annotated[
        float, number_option(THRESHOLD, help="Relative latency change that counts, e.g. 0.05 = 5%.")
    ] = 0.05,
    energy_threshold: Annotated[float, number_option(THRESHOLD, help="Relative J/action increase that counts.")] = 0.05,
    confidence: Annotated[float, number_option(CONFIDENCE, help="Confidence level of the bootstrap interval.")] = 0.95,
    resamples: Annotated[int, number_option(RESAMPLES, help="Bootstrap resamples.")] = 5000,
    seed: Annotated[int, run_option("seed", help="Bootstrap seed.")] = 0,
    phase: Annotated[str, typer.Option(help="Latency phase compared (e2e, prefix, action, …).")] = "e2e",
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Match two results folders by config identity; exit 6 on a latency, energy or correctness regression."""
    from vlabench.cli.views.checks import compare_caveats, compare_table
    from vlabench.results.compare import Settings, compare_folders

    report = compare_folders(baseline, candidate, Settings(**arguments_for(ctx, Settings.model_fields)))
    warn_skipped(report.skipped)
    if as_json:
        write_json(report.model_dump_json(indent=2))
    else:
        stdout.print(compare_table(report))
        for line in compare_caveats(report):
            stdout.print(markup_safe(line), highlight=False)
        for title, names in (("only in baseline", report.only_baseline), ("only in candidate", report.only_candidate)):
            for name in names:
                stdout.print(f"[dim]{markup_safe(title)}:[/] {markup_safe(name)}", highlight=False)
    if report.regressions:
        caveated = sum(bool(match.latency and match.latency.caveats) for match in report.regressions)
        under = f" ({caveated} with caveats: see * above)" if caveated and not as_json else ""
        stderr.print(f"[bold red]{len(report.regressions)} regressed configuration(s){under}[/]")
        raise CheckFailedError


def validate(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="Results folder (or one result file).")],
    min_iterations: Annotated[
        int,
        number_option(Bounds(0, 1_000_000, integer=True), help="Timed inferences each result must have."),
    ] = 10,
    min_duration_s: Annotated[
        float, run_option("min_duration_s", "--min-duration", help="Timed seconds each result must have.")
    ] = 10.0,
    allow_dirty: Annotated[
        bool, typer.Option("--allow-dirty", help="Accept results measured from a modified working tree.")
    ] = False,
    require_measured_energy: Annotated[
        bool, typer.Option("--require-measured-energy", help="Refuse estimated energy (no sensor).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the problems as JSON.")] = False,
) -> None:
    """Check results for publication: schema, provenance, correctness gate, iterations, energy; exit 6 on a problem."""
    from vlabench.cli.views.checks import problems_table
    from vlabench.results.validate import Requirements, validate_folder

    files, problems = validate_folder(folder, Requirements(**arguments_for(ctx, Requirements.model_fields)))
    if not files:
        strangers = "; ".join(f"{problem.file}: {problem.message}" for problem in problems)
        raise InputError(f"{folder}: no result files" + (f" ({strangers})" if strangers else ""))
    if as_json:
        write_json(json.dumps([problem.model_dump() for problem in problems], indent=2))
    elif problems:
        stdout.print(problems_table(problems))
    bad = len({problem.file for problem in problems})
    notes(as_json).print(f"{len(files)} result files checked, {bad} with problems", highlight=False)
    if problems:
        raise CheckFailedError
