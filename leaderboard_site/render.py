"""How the site's pages print values: the Jinja environment, figures with units, JSON safe inside ``<script>``."""

from __future__ import annotations

import math
from typing import Any

import jinja2
import markupsafe

from . import charts
from .rows import slug

UNITS = (
    # (suffix or prefix of a field name, unit): the first match wins
    ("_bytes", "bytes"),
    ("_usd_per_kwh", "$/kWh"),
    ("_ms", "ms"),
    ("_hz", "Hz"),
    ("_kwh", "kWh"),
    ("_gb", "GB"),
    ("_gbs", "GB/s"),
    ("_tflops", "TFLOP/s"),
    ("_w", "W"),
    ("_s", "s"),
    ("_years", "years"),
    ("joules_", "J"),
    ("usd_", "$"),
    ("_usd", "$"),
)


def number(value: Any, digits: int = 4) -> str:
    """A figure with ``digits`` significant digits, an em dash when absent, NaN and ∞ when not finite."""
    if value is None:
        return "—"
    if isinstance(value, float) and not math.isfinite(value):
        return shown(value)
    return f"{value:.{digits}g}"


def shown(value: Any) -> Any:
    """A value as the detail tables print it: non-finite floats as NaN / ∞ / −∞ (Python would say nan, inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("∞" if value > 0 else "−∞")
    return value


def unit_of(key: str) -> str | None:
    for affix, unit in UNITS:
        if key.endswith(affix) if affix.startswith("_") else key.startswith(affix):
            return unit
    return None


def with_unit(value: Any, key: str = "") -> str:
    """A field's value for a person: 6 significant digits (never ``3.5999999999999996``), its unit from the field's
    name (``_ms``, ``_hz``, ``joules_``, ``usd_``...), bytes as GB or MB, yes/no for booleans."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "—"
    if not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return shown(value)
    unit = unit_of(key)
    if unit == "bytes":
        return f"{value / 1e9:.4g} GB" if abs(value) >= 1e8 else f"{value / 1e6:.4g} MB"
    text = str(value) if isinstance(value, int) and unit is None else f"{value:.6g}"
    if unit == "$":
        return f"${text}"
    return f"{text} {unit}" if unit else text


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("vlabench.leaderboard_site", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = number
    env.filters["slug"] = slug
    env.filters["shown"] = shown
    env.filters["unit"] = with_unit
    env.globals["chart"] = lambda name, root: markupsafe.Markup(charts.Charts.html(name, root))
    return env
