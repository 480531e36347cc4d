"""The exported ONNX graphs as OpenVINO IR, with precision-sensitive subgraphs pinned to f32; cached on disk.

On a CPU with native bf16 OpenVINO runs every float op at bf16 when asked (``INFERENCE_PRECISION_HINT``). Two
subgraphs of the flow-matching VLAs cannot take that: the sinusoidal time embedding (``t`` times frequencies up to
2π/0.004 ≈ 1571 rad, so bf16's 8-bit mantissa turns t = 0.9 into 0.898 and the angle off by radians) and the RoPE
angle tables (positions × inverse frequencies). Their argument chains (every float op from a Sin/Cos back to a
parameter, constant or matmul) are marked with OpenVINO's own ``DisablePrecisionConversion`` runtime attribute, the
mark its CPU plugin reads to keep an op in its original precision. Python cannot create that attribute, so it is
written into the IR's XML (``<rt_info>`` of each layer), the documented IR form from which ``read_model`` builds it.

Before marking, two rewrites keep the marks alive through the plugin's own passes (the attribute is not copied to
replacement nodes): no-op Converts (f32 → f32) are bypassed and Unsqueeze/Squeeze with a static output shape become
a Reshape to that shape. Both leave the graph's results unchanged
(``tests/integration/backends/test_openvino_precision.py``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlabench.atomic import publish_folder, staging_folder
from vlabench.backends.onnx_export import ExportedModel, cache_root

IR_FORMAT = "vlabench-ov-ir-1"  # bump when the rewrites or the marks change
KEEP_F32 = "DisablePrecisionConversion"  # OpenVINO's runtime attribute (transformations/rt_info)
KEEP_F32_KEY = f"{KEEP_F32}_0"  # its key in a node's rt_info once read back
KEEP_F32_VALUE = "dynamic:dynamic"  # from any element type to any: no conversion at all
TRIG = ("Sin", "Cos")
STOP = ("MatMul", "Convolution", "Parameter", "Constant")  # a mark chain ends at these
SHAPE_ONLY = ("Unsqueeze", "Squeeze")


@dataclass(frozen=True)
class IrModel:
    """An IR folder: one ``<graph>/<graph>.xml`` per graph, and ``meta.json`` (what it was built from and how)."""

    folder: Path
    reused: bool
    meta: dict[str, Any]

    def xml(self, graph: str) -> Path:
        return self.folder / graph / f"{graph}.xml"

    @property
    def marked(self) -> dict[str, list[str]]:
        """Per graph, the ops pinned to f32."""
        return self.meta.get("kept_f32", {})


def _ops() -> Any:
    import openvino.opset13 as ops

    return ops


def simplify(model: Any) -> None:
    """Bypass no-op Converts and turn static Unsqueeze/Squeeze into Reshape (same results, marks survive)."""
    ops = _ops()
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind == "Convert" and op.get_input_element_type(0) == op.get_output_element_type(0):
            replacement = op.input(0).get_source_output()
        elif kind in SHAPE_ONLY and op.get_output_partial_shape(0).is_static:
            shape = ops.constant(np.array(list(op.get_output_shape(0)), dtype=np.int64))
            reshape = ops.reshape(op.input(0).get_source_output(), shape, special_zero=False)
            reshape.set_friendly_name(op.get_friendly_name())
            replacement = reshape.output(0)
        else:
            continue
        for target in list(op.output(0).get_target_inputs()):
            target.replace_source_output(replacement)
    model.validate_nodes_and_infer_types()


def precision_sensitive(model: Any) -> set[str]:
    """Friendly names of the float ops from each Sin/Cos back to the first parameter, constant or matmul."""
    import openvino as ov

    marked: set[str] = set()
    seen: set[str] = set()
    stack = [op for op in model.get_ops() if op.get_type_name() in TRIG]
    while stack:
        op = stack.pop()
        name = op.get_friendly_name()
        if name in seen or op.get_type_name() in STOP:
            continue
        seen.add(name)
        if all(op.get_output_element_type(i) == ov.Type.f32 for i in range(op.get_output_size())):
            marked.add(name)
        stack.extend(port.get_source_output().get_node() for port in op.inputs())
    return marked


def mark_xml(xml_path: Path, names: set[str]) -> int:
    """Add the keep-f32 attribute to the named layers of a saved IR; returns how many layers were marked."""
    tree = ElementTree.parse(xml_path)
    count = 0
    for layer in tree.getroot().iter("layer"):
        if layer.get("name") not in names:
            continue
        info = layer.find("rt_info")
        if info is None:
            info = ElementTree.Element("rt_info")
            layer.insert(1 if layer.find("data") is not None else 0, info)
        ElementTree.SubElement(info, "attribute", name=KEEP_F32, version="0", value=KEEP_F32_VALUE)
        count += 1
    tree.write(xml_path, encoding="utf-8", xml_declaration=True)
    return count


def marks_honoured(model: Any, names: list[str]) -> bool:
    """Whether this OpenVINO read the marks back as its runtime attribute (an older one drops them)."""
    wanted = set(names)
    found = {op.get_friendly_name() for op in model.get_ops() if KEEP_F32_KEY in op.get_rt_info()}
    return wanted <= found


def openvino_version() -> str:
    import openvino as ov

    return ov.__version__


def ir_key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def cached_ir(folder: Path, meta: dict[str, Any], build: Callable[[Path], dict[str, Any]]) -> IrModel:
    """Reuse ``folder`` when complete, else ``build`` into a staging folder (returns extra meta) renamed over it."""
    if (folder / "meta.json").exists():
        return IrModel(folder, True, json.loads((folder / "meta.json").read_text()))
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(folder.parent, ".partial-")
    try:
        full = {**meta, **build(staging)}
        (staging / "meta.json").write_text(json.dumps(full, indent=2))
        if not publish_folder(staging, folder):
            return IrModel(folder, True, json.loads((folder / "meta.json").read_text()))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return IrModel(folder, False, full)


def float_ir(exported: ExportedModel) -> IrModel:
    """The exported graphs as IR (weights f32, precision-sensitive ops marked), keyed by the export and versions."""
    import openvino as ov

    identity = {"format": IR_FORMAT, "onnx": exported.folder.name, "openvino": openvino_version()}
    folder = cache_root() / "openvino-ir" / f"{exported.folder.name}-float-{ir_key(identity)}"

    def build(staging: Path) -> dict[str, Any]:
        core = ov.Core()
        kept = {}
        for graph in exported.graphs:
            model = core.read_model(str(exported.graph(graph)))
            simplify(model)
            names = precision_sensitive(model)
            (staging / graph).mkdir()
            xml = staging / graph / f"{graph}.xml"
            ov.save_model(model, str(xml), compress_to_fp16=False)
            mark_xml(xml, names)
            kept[graph] = sorted(names)
        return {"kept_f32": kept}

    meta = {**identity, "graphs": exported.graphs, "weights": "f32"}
    return cached_ir(folder, meta, build)
