"""ARCHITECTURE.md's run diagram is the real call path of ``vlabench run``, checked on a real run in a fresh process."""

import json
import re
import subprocess
import sys

from tests.support.paths import ROOT

DIAGRAM_CALL = re.compile(r"(?<![\w.`])([a-z_][a-z0-9_]*)\(\)")


def diagram_calls() -> list[str]:
    """The ``name()`` calls of ARCHITECTURE.md's run diagram, in the order they are written."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text[text.index("## `vlabench run`, from flags to the JSON file") :]
    diagram = section[section.index("```") + 3 :]
    return DIAGRAM_CALL.findall(diagram[: diagram.index("```")])


CALL_RECORDER = """
import json, sys
from vlabench.cli.app import app
wanted, calls = set(json.loads(sys.argv[1])), []
def record(frame, event, _arg):
    if event == "call" and frame.f_code.co_name in wanted and "site-packages" not in frame.f_code.co_filename:
        calls.append(frame.f_code.co_name)
sys.setprofile(record)
try:
    app(sys.argv[2:], standalone_mode=False)
finally:
    sys.setprofile(None)
print(json.dumps(calls))
"""


def test_the_run_diagram_is_the_real_call_path(fast_run, tmp_path):
    """A real run (torch bf16 against the fp32 reference, estimated energy), in a fresh process so no cache hides a
    call, calls every function the diagram names in the diagram's order: the document cannot drift from the code."""
    names = diagram_calls()
    assert len(names) >= 15 and "prepare_contender" in names and "assemble_result" in names
    args = ["run", "-m", "smolvla-tiny", "--precision", "bf16", *fast_run.args(energy_meter="estimated")]
    args += ["--energy-window", "1", "--idle-window", "0.1", "--out", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-c", CALL_RECORDER, json.dumps(names), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    calls = json.loads(done.stdout.strip().splitlines()[-1])
    remaining = iter(calls)
    missing = [name for name in names if not any(call == name for call in remaining)]
    assert not missing, f"not called after the names before them: {missing}; the calls: {calls}"
