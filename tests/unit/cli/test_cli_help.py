"""``--help``: every command shows its defaults (Rich must not take ``[default: …]`` for markup), ``run`` lists its
options in panels that ``profile`` and ``loop`` share, and ``-m``, ``-d``, ``-b``, ``-o`` work wherever the long
flags exist."""

import re

import pytest
import typer
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.cli.options import ENERGY, OPTIMIZATIONS, OUTPUT, SERVING, TARGET, TIMING, WORKLOAD

runner = CliRunner()
PANELS = [TARGET, WORKLOAD, SERVING, TIMING, ENERGY, OPTIMIZATIONS, OUTPUT]  # in the order `run --help` lists them
SHORT = {"--model": "-m", "--device": "-d", "--backend": "-b", "--out": "-o"}


def help_text(command: tuple[str, ...], width: int = 120) -> str:
    """``vlabench COMMAND --help`` as a ``width``-column terminal shows it (typer's Rich console reads COLUMNS)."""
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": str(width)}, terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


def commands(group=None, path: tuple[str, ...] = ()):
    """(path, click command) of every command, subcommands of the groups included."""
    group = group or typer.main.get_command(app)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def options(command) -> list:
    return [param for param in command.params if param.opts and param.opts[0].startswith("--")]


def panels(text: str) -> dict[str, str]:
    """Option (its long flag) → the title of the help panel that lists it."""
    found, title = {}, None
    for line in text.splitlines():
        if heading := re.match(r"╭─ (.+?) ─", line):
            title = heading.group(1)
        elif flag := re.match(r"│ (--[\w-]+)", line):
            found[flag.group(1)] = title
    return found


def option_line(text: str, flag: str) -> str:
    return next(line for line in text.splitlines() if re.match(rf"│ {flag}(?=\s)", line))


def test_run_help_shows_value_and_contextual_defaults():
    text = help_text(("run",))
    assert "[default: 368]" in option_line(text, "--min-iterations")
    assert "[default: 10.0]" in option_line(text, "--control-hz")
    assert "[default: smolvla]" in option_line(text, "--model")
    assert "[default: the model's]" in option_line(text, "--cameras")
    assert "[default: fp32 on CPU, bf16 on CUDA]" in option_line(text, "--precision")
    assert text.count("[default: ") >= 25


@pytest.mark.parametrize(("path", "command"), list(commands()), ids=[" ".join(path) for path, _ in commands()])
def test_every_default_written_in_a_help_text_is_shown(path, command):
    """A ``[default: …]`` in an option's help must survive Rich markup (each option on one line at 300 columns)."""
    text = help_text(path, width=300)
    for param in options(command):
        if "default" not in (param.help or ""):
            continue
        line = option_line(text, param.opts[0])
        written = re.search(r"default: ([^\]]+)\]", param.help)
        assert (f"[default: {written.group(1)}]" if written else "default") in line, (param.opts[0], line)


def test_run_groups_its_options_into_panels_profile_and_loop_share():
    run = panels(help_text(("run",)))
    assert [title for title in dict.fromkeys(run.values()) if title != "Options"] == PANELS
    expected = {
        "--model": "Model and target",
        "--checkpoint": "Model and target",
        "--compile-mode": "Model and target",
        "--cameras": "Workload",
        "--seed": "Workload",
        "--batch": "Workload",
        "--robots": "Serving several robots",
        "--remote": "Serving several robots",
        "--warmup": "Timing",
        "--min-iterations": "Timing",
        "--threads": "Timing",
        "--control-hz": "Timing",
        "--execution": "Timing",
        "--actions-per-chunk": "Timing",
        "--energy-meter": "Energy and cost",
        "--price-usd": "Energy and cost",
        "--usd-per-kwh": "Energy and cost",
        "--dp-cache": "Optimizations",
        "--fuse-expert-kv": "Optimizations",
        "--fuse-denoise-loop": "Optimizations",
        "--measure-ceilings": "Optimizations",
        "--out": "Output",
        "--json": "Output",
        "--config": "Output",
    }
    assert {flag: run[flag] for flag in expected} == expected
    assert set(run) - {"--help"} <= {flag for flag, title in run.items() if title in PANELS}
    for command in ("profile", "loop"):
        shared = panels(help_text((command,)))
        for flag in ("--model", "--device", "--backend", "--cameras", "--steps", "--seed", "--threads", "--out"):
            assert shared[flag] == run[flag], (command, flag)


def test_short_flags_exist_wherever_the_long_ones_do():
    for path, command in commands():
        for param in options(command):
            if param.opts[0] in SHORT:
                assert SHORT[param.opts[0]] in param.opts, (" ".join(path), param.opts)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-m", "smolvl"], "Did you mean 'smolvla'"),
        (["-m", "smolvla-tiny", "-d", "nonsense"], "Unknown device 'nonsense'"),
        (["-m", "smolvla-tiny", "-b", "torchh"], "Did you mean 'torch'"),
    ],
)
def test_short_flags_reach_the_run(tmp_path, args, message):
    """Each short flag's value is what the error names: it was parsed as that option, and nothing ran."""
    result = runner.invoke(app, ["run", *args, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in result.output and "No such option" not in result.output
    assert not (tmp_path / "out").exists()
