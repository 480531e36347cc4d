"""Where the tests find the repository and their recorded inputs, wherever the test module sits under tests/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"

# Artifacts written before the artifact header (run schema 1.0 and the unversioned others), by a real tiny run.
ARTIFACTS = DATA / "artifacts"
LEGACY_RUN = ARTIFACTS / "20261201T042521Z_smolvla-tiny_generic-x86-cpu_torch_fp32_c87a67ed.json"
LEGACY_PROFILE = ARTIFACTS / "20261201T042602Z_smolvla-tiny_generic-x86-cpu_torch_fp32_f73baa10.profile.json"
LEGACY_LOOP = ARTIFACTS / "20261201T042549Z_smolvla-tiny_generic-x86-cpu_torch_fp32_s5_0d376a76.loop.json"
LEGACY_FIDELITY = ARTIFACTS / "20261201T042637Z_smolvla-tiny.fidelity.json"
LEGACY_DP_CACHE = ARTIFACTS / "smolvla-tiny.dp-cache.json"
