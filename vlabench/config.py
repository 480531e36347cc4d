"""Run configuration: every knob of ``vlabench run``, with the defaults the CLI prints and the range each may take.

Every number is finite and bounded (the bounds are in :data:`LIMITS`, and each field's description says them): a
value a real run never needs (a 1 GHz control rate, a 10⁹ s window, 10⁵ threads) is refused before any work instead
of hanging, overflowing, crashing a runtime or being written as ``null``. Scalars are strict: YAML ``steps: true`` or
``steps: "4"`` is refused, not coerced (an integer is accepted where a float is expected)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictFloat,
    StrictInt,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

SEED_LIMIT = 2**63
"""Seeds are 0 ≤ seed < 2**63 (what torch and numpy generators take)."""

LIMITS: dict[str, tuple[float, float]] = {
    "cameras": (1, 65_536),  # the memory check refuses, with exit 4, what does not fit
    "batch": (1, 65_536),
    "robots": (1, 65_536),
    "max_robots": (1, 4096),
    "max_wait_ms": (0.0, 60_000.0),
    "serve_duration_s": (0.1, 86_400.0),
    "request_timeout_s": (0.001, 86_400.0),
    "connect_timeout_s": (0.1, 3_600.0),
    "jpeg_quality": (1, 95),
    "steps": (1, 10_000),
    "chunk": (1, 10_000),
    "actions_per_chunk": (1, 10_000),
    "warmup": (0, 100_000),
    "min_iterations": (1, 1_000_000),
    "max_iterations": (1, 1_000_000),
    "seed": (0, SEED_LIMIT - 1),
    "threads": (1, 1024),
    "min_duration_s": (0.0, 86_400.0),
    "max_duration_s": (0.1, 86_400.0),
    "duration_s": (0.1, 604_800.0),
    "window_s": (0.1, 86_400.0),
    "idle_probe_s": (0.0, 3_600.0),
    "sensor_period_s": (0.05, 600.0),
    "control_hz": (0.0, 1e6),
    "energy_window_s": (1.0, 600.0),
    "idle_window_s": (0.0, 600.0),
    "tdp_w": (0.0, 1e5),
    "idle_w": (0.0, 1e5),
    "price_usd": (0.0, 1e7),
    "lifetime_years": (0.0, 50.0),
    "duty_cycle": (0.0, 1.0),
    "usd_per_kwh": (0.0, 100.0),
}
"""Field → (low, high), both inclusive unless the field is in :data:`OPEN_BELOW` (then ``low < value``); integer
bounds for integer fields, float bounds for float fields."""
TIMED_BY_COUNT = frozenset({"min_iterations", "min_duration_s", "max_iterations", "max_duration_s"})
"""What stops an ordinary run; a sustained run (``duration_s``) stops at its duration instead (and refuses them set
to anything but their defaults)."""
OPEN_BELOW = frozenset({"control_hz", "idle_window_s", "tdp_w", "price_usd", "lifetime_years", "duty_cycle"})


def show_number(value: float) -> str:
    """A bound as people write it: 86400, 0.5, 1e6, 2**63-1."""
    if value == SEED_LIMIT - 1:
        return "2**63-1"
    return f"{value:g}".replace("e+0", "e").replace("e+", "e")


def describe_range(low: float, high: float, open_below: bool = False, open_above: bool = False) -> str:
    """``0 < x ≤ 1e6``: the range of a bounded number, for help texts and errors."""
    return f"{show_number(low)} {'<' if open_below else '≤'} x {'<' if open_above else '≤'} {show_number(high)}"


def bounded(name: str, default: Any, description: str = "") -> Any:
    """The Field of a number in :data:`LIMITS`: finite, within its range, the range written in its description."""
    low, high = LIMITS[name]
    lower = {"gt": low} if name in OPEN_BELOW else {"ge": low}
    if isinstance(low, int) and low == 1:
        lower = {"gt": 0}  # the same for an integer; pydantic then says "greater than 0"
    shown = describe_range(low, high, name in OPEN_BELOW)
    text = f"{description}; {shown}" if description else shown
    return Field(default=default, le=high, allow_inf_nan=False, description=text, **lower)


RobotsCount = int | Literal["auto"] | None


def _robots(value: Any) -> RobotsCount:
    """``--robots``: an integer within its range, ``auto`` (the capacity search) or None (not served)."""
    if value is None or value == "auto":
        return value
    low, high = LIMITS["robots"]
    if type(value) is not int:
        raise PydanticCustomError("robots_type", "expected an integer robot count or auto")
    if not low <= value <= high:
        raise PydanticCustomError("robots_range", f"{value} is out of range; use {describe_range(low, high)} or auto")
    return value


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "smolvla"
    device: str = "auto"
    backend: str = Field(default="torch", description="a backend, a comma-separated list, or all")
    ep: str | None = Field(default=None, description="onnxruntime execution provider (cpu, cuda, tensorrt, ...)")
    device_target: str | None = Field(default=None, description="openvino device (CPU, GPU, NPU, ...)")
    quant_scheme: str | None = Field(
        default=None, description="int8 scheme: openvino ptq or weights, onnxruntime dynamic or qdq; None: default"
    )
    compile_mode: str = Field(default="default", description="torch.compile mode for the torch-compile backend")
    fuse_denoise_loop: StrictBool = Field(default=False, description="torch-compile on CUDA: one CUDA graph per loop")
    precision: str | None = Field(default=None, description="None: fp32 on CPUs, bf16 on CUDA")
    cameras: StrictInt | None = bounded("cameras", None, "None: the model's default")
    steps: StrictInt | None = bounded("steps", None, "None: the model's default")
    batch: StrictInt = bounded(
        "batch", 1, "observations per inference (the maximum batch with robots): each serves this many robots"
    )
    robots: Annotated[int | Literal["auto"] | None, PlainValidator(_robots, json_schema_input_type=RobotsCount)] = (
        Field(
            default=None,
            description="serve this many robots from one policy instance through a dynamic batcher (1 ≤ x ≤ 65536), or "
            "auto: the most whose every p99 passes the control gate (a capacity search); None: not served",
        )
    )
    max_robots: StrictInt = bounded("max_robots", 64, "robots auto: the largest count the capacity search tries")
    arrivals: Literal["closed", "poisson"] = Field(
        default="closed", description="closed: a robot asks under its execution model; poisson: open loop"
    )
    max_wait_ms: StrictFloat = bounded("max_wait_ms", 5.0, "the batcher waits at most this long to fill a batch")
    serve_duration_s: StrictFloat = bounded("serve_duration_s", 10.0, "how long the robots are served")
    remote: str | None = Field(
        default=None, description="HOST:PORT of a `vlabench serve` policy server: robots here, the policy there"
    )
    request_timeout_s: StrictFloat = bounded(
        "request_timeout_s", 30.0, "--remote: a robot gives up on a request unanswered for this long"
    )
    connect_timeout_s: StrictFloat = bounded(
        "connect_timeout_s", 10.0, "--remote: how long to wait for the server to accept and finish starting"
    )
    encoding: Literal["jpeg", "png", "raw"] = Field(default="jpeg", description="--remote: camera frames' encoding")
    jpeg_quality: StrictInt = bounded("jpeg_quality", 90, "--remote with jpeg frames")
    link: str | None = Field(
        default=None,
        description="--remote: an emulated link on the way (ethernet, wifi, or delay=MS,jitter=MS,rate=MBIT,loss=%)",
    )
    tls_ca: Path | None = Field(default=None, description="--remote: the CA the server's certificate must chain to")
    tls_cert: Path | None = Field(default=None, description="--remote: this client's certificate (with --tls-key)")
    tls_key: Path | None = Field(default=None, description="--remote: this client's private key")
    token_file: Path | None = Field(default=None, description="--remote: a file holding the server's access token")
    chunk: StrictInt | None = bounded("chunk", None, "None: the model's default")
    execution: Literal["per-step", "sync", "async"] = Field(
        default="per-step",
        description="per-step: one inference per control step (the paper's gate); sync or async: chunked execution",
    )
    actions_per_chunk: StrictInt | None = bounded(
        "actions_per_chunk", None, "chunked execution only; None: the model's default; at most the chunk"
    )
    warmup: StrictInt = bounded("warmup", 2)
    min_iterations: StrictInt | None = bounded(
        "min_iterations", None, "None: the count a 95% bound on the judged p99 needs (368), within max_duration_s"
    )
    min_duration_s: StrictFloat = bounded("min_duration_s", 10.0)
    max_iterations: StrictInt = bounded("max_iterations", 1000, "at least min_iterations")
    max_duration_s: StrictFloat = bounded(
        "max_duration_s", 120.0, "timed seconds after which a run stops short of min_iterations (≥ min_duration_s)"
    )
    duration_s: StrictFloat | None = bounded(
        "duration_s", None, "a sustained run: time for this long, whatever the iteration and duration settings"
    )
    window_s: StrictFloat = bounded("window_s", 10.0, "latency percentiles per window of this many seconds")
    idle_probe_s: StrictFloat = bounded(
        "idle_probe_s", 0.0, "idle this long after timing, then time one inference; 0: not measured"
    )
    sensor_period_s: StrictFloat = bounded("sensor_period_s", 1.0, "thermal, clock and throttle sensors' period")
    preprocess: StrictBool = Field(
        default=True, description="time the input pipeline (tokenize, resize, normalize) inside end-to-end"
    )
    control_hz: StrictFloat = bounded("control_hz", 10.0)
    seed: StrictInt = bounded("seed", 0)
    threads: StrictInt | None = bounded("threads", None, "torch intra-op threads; None: torch's default")
    out: Path = Path("results")
    energy_meter: str = Field(
        default="auto",
        description="auto, an energy meter by its sensor's name (`vlabench run --help`), estimated, none",
    )
    energy_log: Path | None = Field(default=None, description="CSV power log of an external (wall) meter")
    energy_window_s: StrictFloat = bounded("energy_window_s", 2.0, "energy is measured over whole inferences ≥ this")
    idle_window_s: StrictFloat = bounded("idle_window_s", 1.0, "idle power is measured over this window first")
    tdp_w: StrictFloat | None = bounded("tdp_w", None, "override the profile's TDP for estimated energy")
    idle_w: StrictFloat | None = bounded("idle_w", None, "override the idle power for estimated energy; ≤ tdp_w")
    price_usd: StrictFloat | None = bounded("price_usd", None, "override the profile's purchase price")
    lifetime_years: StrictFloat = bounded("lifetime_years", 3.0)
    duty_cycle: StrictFloat = bounded("duty_cycle", 0.5)
    usd_per_kwh: StrictFloat = bounded("usd_per_kwh", 0.15)
    measure_ceilings: StrictBool = Field(default=False, description="measure GEMM peak and bandwidth before timing")
    dp_cache: str | None = Field(default=None, description="DP-Cache schedule: a step set, segment:A-B/S, or a file")
    checkpoint: Path | None = Field(
        default=None, description="lerobot model.safetensors (or its folder) to load instead of seeded weights"
    )
    fuse_expert_kv: StrictBool = Field(
        default=False, description="torch: hoist the expert's prefix K/V work out of the loop"
    )

    # Checks across fields sit on the later field (pydantic validates in declaration order), so an error names it.
    @field_validator("actions_per_chunk")
    @classmethod
    def _actions_fit_the_chunk(cls, value: int | None, info: Any) -> int | None:
        if value is not None and info.data.get("execution") == "per-step":
            raise PydanticCustomError(
                "actions_need_chunked_execution",
                f"{value} actions per chunk needs chunked execution: choose --execution sync or async "
                "(per-step, the default, executes one action per inference)",
            )
        chunk = info.data.get("chunk")
        if value is not None and chunk is not None and value > chunk:
            raise PydanticCustomError(
                "actions_exceed_chunk", f"{value} actions per chunk is more than the chunk length {chunk}"
            )
        return value

    @field_validator("max_iterations")
    @classmethod
    def _max_at_least_min(cls, value: int, info: Any) -> int:
        low = info.data.get("min_iterations")
        if low is not None and value < low:
            raise PydanticCustomError("max_below_min", f"{value} is below min_iterations {low}")
        return value

    @model_validator(mode="after")
    def _duration_alone(self) -> RunConfig:
        fields = type(self).model_fields
        changed = {name for name in TIMED_BY_COUNT if getattr(self, name) != fields[name].default}
        clashing = sorted(changed) if self.duration_s is not None else []
        if clashing:
            flags = ", ".join("--" + name.removesuffix("_s").replace("_", "-") for name in clashing)
            raise PydanticCustomError(
                "duration_with_counts", f"--duration times for exactly that long; drop {flags} (they do not apply)"
            )
        return self

    @field_validator("idle_w")
    @classmethod
    def _idle_at_most_tdp(cls, value: float | None, info: Any) -> float | None:
        tdp = info.data.get("tdp_w")
        if value is not None and tdp is not None and value > tdp:
            raise PydanticCustomError("idle_above_tdp", f"idle power {value:g} W is above the TDP {tdp:g} W")
        return value

    @classmethod
    def check_field(cls, name: str, value: Any) -> Any:
        """``value`` validated as field ``name`` alone (type, strictness, range; no check against other fields);
        raises pydantic's ValidationError, located at ``name``."""
        return _field_adapter(name).validate_python({name: value})[name]


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _field_adapter(name: str) -> TypeAdapter[Any]:
    if name not in _ADAPTERS:
        field = RunConfig.model_fields[name]
        _ADAPTERS[name] = TypeAdapter(dict[str, Annotated[field.annotation, field]])  # type: ignore[name-defined]
    return _ADAPTERS[name]
