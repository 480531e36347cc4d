"""The artifact registry (``results.artifacts``) is whole in a fresh interpreter that imports nothing above results:
what else a process imported never changes which kinds it reads."""

import json
import subprocess
import sys
import textwrap

from tests.support.paths import LEGACY_FIDELITY, LEGACY_LOOP, LEGACY_PROFILE, ROOT
from vlabench.results.artifacts import artifact_types


def test_the_registry_does_not_depend_on_what_else_was_imported():
    code = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from vlabench.results.artifacts import artifact_types, load_artifact
        loaded = [type(load_artifact(Path(path))).__name__ for path in sys.argv[1:]]
        above = sorted(m for m in sys.modules if m.startswith(("vlabench.commands", "vlabench.fleet", "vlabench.cli")))
        kinds = {kind: cls.__name__ for kind, cls in artifact_types().items()}
        print(json.dumps({"kinds": kinds, "loaded": loaded, "above": above}))
        """
    )
    paths = [str(path) for path in (LEGACY_PROFILE, LEGACY_LOOP, LEGACY_FIDELITY)]
    done = subprocess.run(
        [sys.executable, "-c", code, *paths], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["kinds"] == {kind: cls.__name__ for kind, cls in artifact_types().items()}
    assert report["loaded"] == ["ProfileResult", "LoopResult", "FidelityReport"]
    assert report["above"] == []  # no command or fleet module is needed to read their artifacts
