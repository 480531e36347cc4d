// Leaderboard controls: CET priority, control-rate target, filters and column sorting over the embedded rows.
// The gate, the cost recomputation and the ranking below mirror vlabench/analysis/cet.py exactly (feasibility,
// cost_report, pareto_axes / pareto_front, rank): change both together. Data is only ever written with
// textContent, never as HTML.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("leaderboard-data").textContent);
  const rows = data.rows;
  const tbody = document.getElementById("leaderboard").tBodies[0];
  const trById = new Map(Array.from(tbody.rows, (tr) => [tr.dataset.id, tr]));
  const headers = Array.from(document.querySelectorAll("#leaderboard thead th"));
  const PRIORITY_COLUMNS = { cost: "usd_per_million_actions", energy: "joules_per_action", time: "latency_p50_ms" };
  const priorityInput = document.getElementById("priority");
  const hzInput = document.getElementById("control-hz");
  const filters = Array.from(document.querySelectorAll(".controls select[data-key]"));
  let sortKey = null;
  let sortDir = 1;

  const present = (x) => x !== null && x !== undefined && !Number.isNaN(x);
  const g = (x) => String(Number(x.toPrecision(6))); // Python's "{:g}" for the magnitudes involved
  const num = (x, digits) => (present(x) ? String(Number(x.toPrecision(digits))) : "—");

  // cet.cost_report: per robot-hour at the delivered action rate, idle power between inferences, amortized price.
  function cost(row, controlHz) {
    const c = row.cost_inputs;
    if (!c) return { full: null, electricity: null };
    const delivered = Math.min(controlHz, (row.actions_per_chunk * 1000.0) / row.latency_p50_ms);
    const actionsPerHour = delivered * 3600.0;
    const inferencesPerHour = actionsPerHour / row.actions_per_chunk;
    const busy = Math.min(3600.0, (inferencesPerHour * row.latency_p50_ms) / 1000.0);
    const joules = inferencesPerHour * c.joules_per_inference + (3600.0 - busy) * c.idle_w;
    const electricity = (joules / 3.6e6) * c.electricity_usd_per_kwh;
    const hardware = c.price_usd === null ? null : c.price_usd / (c.lifetime_years * 8760.0 * c.duty_cycle);
    const total = hardware === null ? electricity : hardware + electricity;
    const perMillion = (total / actionsPerHour) * 1e6;
    return hardware === null ? { full: null, electricity: perMillion } : { full: perMillion, electricity: null };
  }

  // cet.feasibility: fits the device's memory, p99 action rate meets the target, passed the correctness gate.
  function feasibility(row, controlHz) {
    const reasons = [];
    if (present(row.device_memory_gb) && row.memory_needed_gb > row.device_memory_gb) {
      reasons.push(`needs ${row.memory_needed_gb.toFixed(1)} GB > ${g(row.device_memory_gb)} GB memory`);
    }
    const actionHzP99 = (row.actions_per_chunk * 1000.0) / row.latency_p99_ms;
    if (actionHzP99 < controlHz) reasons.push(`${actionHzP99.toFixed(1)} actions/s at p99 < ${g(controlHz)} Hz`);
    if (!row.valid) reasons.push(row.invalid_reason || "failed the correctness gate");
    return reasons;
  }

  // cet.pareto_front: not beaten by another row on every axis and strictly on one (lower is better).
  function markPareto(candidates, axes) {
    for (const row of candidates) {
      row.now.pareto = !candidates.some(
        (other) =>
          other !== row &&
          axes.every((a) => other.now[a] <= row.now[a]) &&
          axes.some((a) => other.now[a] < row.now[a])
      );
    }
  }

  // cet.rank: gate, Pareto among feasible rows, then feasible rows with a value ordered by (priority, p50).
  function evaluate(priority, controlHz) {
    const runs = rows.filter((r) => r.kind === "run");
    for (const row of runs) {
      const reasons = feasibility(row, controlHz);
      const dollars = cost(row, controlHz);
      row.now = {
        feasible: reasons.length === 0,
        reasons: reasons.join("; "),
        rank: null,
        pareto: false,
        latency_p50_ms: row.latency_p50_ms,
        joules_per_action: row.joules_per_action,
        usd_per_million_actions: dollars.full,
        usd_per_million_actions_electricity_only: dollars.electricity,
      };
    }
    const feasible = runs.filter((r) => r.now.feasible);
    const axes = ["latency_p50_ms", "joules_per_action"];
    if (feasible.length && feasible.every((r) => present(r.now.usd_per_million_actions))) {
      axes.push("usd_per_million_actions");
    }
    markPareto(feasible.filter((r) => axes.every((a) => present(r.now[a]))), axes);
    const key = PRIORITY_COLUMNS[priority];
    const ranked = feasible
      .filter((r) => present(r.now[key]))
      .sort((a, b) => a.now[key] - b.now[key] || a.latency_p50_ms - b.latency_p50_ms);
    ranked.forEach((row, i) => (row.now.rank = i + 1));
    const rest = runs.filter((r) => r.now.rank === null).sort((a, b) => compare(a.now[key], b.now[key], 1));
    for (const row of rows.filter((r) => r.kind === "reported")) row.now = { ...row, rank: null, pareto: false };
    return [...ranked, ...rest, ...rows.filter((r) => r.kind === "reported")];
  }

  function compare(a, b, direction) {
    if (!present(a) && !present(b)) return 0;
    if (!present(a)) return 1; // missing values last in both directions
    if (!present(b)) return -1;
    if (typeof a === "number" && typeof b === "number") return (a - b) * direction;
    return String(a).localeCompare(String(b)) * direction;
  }

  function status(row, priority) {
    if (row.kind === "reported") return null;
    if (!row.now.feasible) return `infeasible: ${row.now.reasons}`;
    if (row.now.rank === null) {
      return priority === "cost" ? "feasible; not ranked by cost: no purchase price (electricity only)" : "feasible";
    }
    return "feasible";
  }

  function render() {
    const priority = priorityInput.value;
    const controlHz = Number(hzInput.value);
    if (!(controlHz > 0)) return;
    let ordered = evaluate(priority, controlHz);
    if (sortKey !== null) {
      const value = (r) => (sortKey in r.now ? r.now[sortKey] : r[sortKey]);
      ordered = [...ordered].sort((a, b) => compare(value(a), value(b), sortDir));
    }
    let shown = 0;
    for (const row of ordered) {
      const tr = trById.get(row.id);
      tbody.appendChild(tr);
      const visible = filters.every((f) => f.value === "" || String(row[f.dataset.key]) === f.value);
      tr.hidden = !visible;
      shown += visible ? 1 : 0;
      if (row.kind !== "run") continue;
      tr.classList.toggle("infeasible", !row.now.feasible);
      tr.querySelector(".rank").textContent = (row.now.rank ?? "") + (row.now.pareto ? " ◆" : "");
      tr.querySelector(".status").textContent = status(row, priority);
      const full = row.now.usd_per_million_actions;
      const electricity = row.now.usd_per_million_actions_electricity_only;
      tr.querySelector(".cost").textContent = present(full)
        ? num(full, 4)
        : present(electricity)
          ? `${num(electricity, 4)} elec.`
          : "—";
    }
    document.getElementById("shown").textContent = `${shown} of ${rows.length} rows shown`;
    for (const th of headers) {
      th.classList.toggle("sorted-asc", th.dataset.key === sortKey && sortDir === 1);
      th.classList.toggle("sorted-desc", th.dataset.key === sortKey && sortDir === -1);
    }
  }

  for (const th of headers) {
    th.addEventListener("click", () => {
      sortDir = sortKey === th.dataset.key ? -sortDir : 1;
      sortKey = th.dataset.key;
      render();
    });
  }
  priorityInput.addEventListener("change", () => {
    sortKey = null; // a new priority shows the ranking again
    render();
  });
  hzInput.addEventListener("input", render);
  for (const f of filters) f.addEventListener("change", render);
  render();
})();
