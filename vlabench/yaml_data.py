"""Schema-validated YAML: packaged profiles and user config files, with errors that name the file and field."""

from __future__ import annotations

from importlib import resources
from typing import TypeVar

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from vlabench.errors import InputError

Model = TypeVar("Model", bound=BaseModel)


def describe_validation(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())


def parse_yaml(text: str, schema: type[Model] | TypeAdapter, origin: str, what: str, empty_ok: bool = False) -> Model:
    """``text`` validated against ``schema`` (a model or a TypeAdapter over a union); malformed YAML or invalid
    fields raise InputError naming ``origin``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{origin}: malformed YAML: {exc}") from None
    try:
        data = {} if data is None and empty_ok else data
        if isinstance(schema, TypeAdapter):
            return schema.validate_python(data)
        return schema.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{origin}: invalid {what}: {describe_validation(exc)}") from None


def packaged_names(folder: str) -> list[str]:
    """Names of the ``profiles/<folder>/*.yaml`` files shipped with vlabench."""
    root = resources.files("vlabench.profiles").joinpath(folder)
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def load_packaged(folder: str, name: str, schema: type[Model] | TypeAdapter, what: str) -> Model:
    text = resources.files("vlabench.profiles").joinpath(folder, f"{name}.yaml").read_text()
    return parse_yaml(text, schema, f"profiles/{folder}/{name}.yaml", what)
