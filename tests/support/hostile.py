"""Hostile results: one real result file (``benchmarks/site_scale.py``'s base, with its cost) and the mutations
that make it impossible, written as a reader finds them."""

import copy
import json
from collections.abc import Callable
from pathlib import Path

from tests.support.benchmarks import load

site_scale = load("site_scale")
BASE = site_scale.with_cost(site_scale.base_result())
"""A real result (tests/data/artifacts) with an energy block, its cost and a real roofline: valid, and rankable."""

Mutation = tuple[str, Callable[[dict], None], str]
"""(what, how it changes the parsed document, the field a reader must name)."""


def setter(path: tuple, value) -> Callable[[dict], None]:
    def change(document: dict) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        if value is DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return change


DELETE = object()


def write(folder: Path, name: str, document: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document)
    mark = document.get("backend_details")
    if isinstance(mark, str) and mark.startswith("__DEEP_"):
        depth = int(mark.removeprefix("__DEEP_").removesuffix("__"))
        text = text.replace(json.dumps(mark), "[" * depth + "]" * depth)
    path = folder / name
    path.write_text(text)
    return path


def mutated(mutation: Mutation, run_id: str = "f" * 32) -> dict:
    document = copy.deepcopy(BASE)
    document["run_id"] = run_id
    mutation[1](document)
    return document
