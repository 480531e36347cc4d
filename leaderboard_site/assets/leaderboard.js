// Leaderboard controls: CET priority, control-rate target, execution model, ranking groups, filters, sorting, the
// model x device matrix and the Pareto charts, all over the embedded rows. The gate, the cost and the ranking below
// mirror vlabench/analysis/cet.py exactly (gate, cost_report, feasibility, pareto_axes / pareto_front, rank): change
// both together. Data is only ever written with textContent, never as HTML.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("leaderboard-data").textContent);
  const rows = data.rows;
  const tbody = document.getElementById("leaderboard").tBodies[0];
  const trById = new Map(Array.from(tbody.rows, (tr) => [tr.dataset.id, tr]));
  const headers = Array.from(document.querySelectorAll("#leaderboard thead th"));
  const PRIORITY_COLUMNS = { cost: "usd_per_million_actions", energy: "joules_per_action", time: "latency_p50_ms" };
  const $ = (id) => document.getElementById(id);
  const filters = Array.from(document.querySelectorAll(".controls select[data-key]"));
  let sortKey = null;
  let sortDir = 1;

  const present = (x) => x !== null && x !== undefined && !Number.isNaN(x);
  // A row's figure for a priority: cost is the group's basis (full, else electricity only), as cet.rank ranks it.
  const figure = (row, key) => (key === "usd_per_million_actions" ? row.now.cost : row.now[key]);
  // Python's format(x, f".{digits}g"): fixed or exponent notation, trailing zeros dropped.
  function pyG(x, digits) {
    if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
    if (x === 0) return "0";
    const [mantissa, exponent] = x.toExponential(digits - 1).split("e");
    const e = Number(exponent);
    const strip = (s) => (s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s);
    if (e < -4 || e >= digits) return `${strip(mantissa)}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
    return strip(x.toFixed(Math.max(0, digits - 1 - e)));
  }
  const num = (x, digits) => (present(x) ? pyG(x, digits) : "—");

  function settings() {
    const n = Number($("chunk-n").value);
    return {
      priority: $("priority").value,
      controlHz: Number($("control-hz").value),
      mode: $("execution").value,
      n: Number.isInteger(n) && n >= 1 ? n : 1,
      approximateTogether: $("approximate-together").checked,
      projectedTogether: $("projected-together").checked,
    };
  }

  // cet.ExecutionModel.actions_per_inference and cet._delivered_hz
  const actionsPerInference = (s) => (s.mode === "per-step" ? 1 : s.n);
  function deliveredHz(latencyMs, s) {
    const seconds = latencyMs / 1000.0;
    if (s.mode === "per-step") return Math.min(s.controlHz, 1.0 / seconds);
    if (s.mode === "sync") return s.n / (s.n / s.controlHz + seconds);
    return Math.min(s.controlHz, s.n / seconds);
  }

  // cet.gate: per-step needs the p99 inference rate, sync at most one control period of waiting per chunk, async
  // the next chunk ready before the current one runs out.
  function gate(row, s) {
    const p99 = row.latency_p99_ms;
    const periodMs = 1000.0 / s.controlHz;
    const budgetMs = periodMs * (s.mode === "async" ? s.n : 1);
    const meets = p99 <= budgetMs;
    const reasons = {
      "per-step": () => `${pyG(1000.0 / p99, 3)} inferences/s at p99 < ${pyG(s.controlHz, 6)} Hz`,
      sync: () =>
        `p99 latency ${pyG(p99, 4)} ms pauses the robot longer than one control period (${pyG(periodMs, 4)} ms) per chunk`,
      async: () => `p99 latency ${pyG(p99, 4)} ms > the chunk's ${s.n} actions at ${pyG(s.controlHz, 6)} Hz (${pyG(budgetMs, 4)} ms)`,
    };
    return {
      meets,
      reason: meets ? null : reasons[s.mode](),
      inference_hz_p50: 1000.0 / row.latency_p50_ms,
      inference_hz_p99: 1000.0 / p99,
      reaction_ms: p99,
      delivered_action_hz: deliveredHz(row.latency_p50_ms, s),
    };
  }

  // pages.PAGE_DEFAULTS: what a page row leaves out because it is the usual value.
  const PAGE_DEFAULTS = { deployment: "on-robot", robots: 1, robots_per_device: 1.0, rows_per_inference: 1.0 };
  // cet.shared: how many robots share the device, and how many of them one inference serves (1 when not recorded).
  const shared = (row, key) => (present(row[key]) && row[key] > 0 ? row[key] : PAGE_DEFAULTS[key]);

  // cet.cost_report: per robot-hour at the delivered action rate, idle power between inferences, amortized price;
  // a device serving several robots runs one inference per batch of their requests and shares its idle hour and
  // price among them.
  function costPerMillion(row, s, price) {
    const robots = shared(row, "robots_per_device");
    const actionsPerHour = deliveredHz(row.latency_p50_ms, s) * 3600.0;
    const inferencesPerHour = actionsPerHour / actionsPerInference(s) / shared(row, "rows_per_inference");
    const busy = Math.min(3600.0, (inferencesPerHour * row.latency_p50_ms) / 1000.0);
    const idle = Math.max(0.0, 3600.0 / robots - busy);
    const joules = inferencesPerHour * row.joules_per_inference + idle * row.idle_w;
    const electricity = (joules / 3.6e6) * row.electricity_usd_per_kwh;
    const hardware = price === null ? null : price / (row.lifetime_years * 8760.0 * row.duty_cycle) / robots;
    const total = hardware === null ? electricity : hardware + electricity;
    return (total / actionsPerHour) * 1e6;
  }

  // cet.action_costs (through cet._regate): J per executed action, full cost (with a price) and electricity only.
  function actionCosts(row, s) {
    if (!present(row.joules_per_inference)) {
      return { joules_per_action: null, usd_per_million_actions: null, usd_per_million_actions_electricity_only: null };
    }
    const price = present(row.price_usd) ? row.price_usd : null;
    const finite = (x) => (Number.isFinite(x) ? x : null); // NaN (no idle power) is no figure, as in pandas
    return {
      joules_per_action: row.joules_per_inference / actionsPerInference(s) / shared(row, "rows_per_inference"),
      usd_per_million_actions: price === null ? null : finite(costPerMillion(row, s, price)),
      usd_per_million_actions_electricity_only: finite(costPerMillion(row, s, null)),
    };
  }

  // cet.feasibility: fits the device's usable memory, executes no more actions than the model predicts, the
  // execution model's gate holds, passed the correctness gate.
  function feasibility(row, s, verdict) {
    const reasons = [];
    if (present(row.device_memory_gb) && row.memory_needed_gb > row.device_memory_gb) {
      const plate = row.device_memory_nameplate_gb;
      const shown = present(plate) && plate !== row.device_memory_gb ? ` (${pyG(plate, 6)} GB nameplate)` : "";
      reasons.push(`needs ${row.memory_needed_gb.toFixed(1)} GB > ${pyG(row.device_memory_gb, 6)} GB usable memory${shown}`);
    }
    if (s.mode !== "per-step" && present(row.chunk) && s.n > row.chunk) {
      reasons.push(`executes ${s.n} actions per chunk, the model predicts ${Math.trunc(row.chunk)}`);
    }
    if (!verdict.meets) reasons.push(verdict.reason);
    if (!row.valid) reasons.push(row.invalid_reason || "failed the correctness gate");
    return reasons;
  }

  // A projection is a value ± its stack's leave-one-out error band (a measured or published row: the value alone).
  // Two rows whose intervals overlap on the priority figure are not ranked apart; at least one must have a band.
  function bandsOverlap(a, b, key) {
    if (!present(a.error_band) && !present(b.error_band)) return false;
    const interval = (row) => {
      const value = figure(row, key);
      const band = present(row.error_band) ? row.error_band : 0;
      return [value * Math.max(0, 1 - band), value * (1 + band)];
    };
    const [lowA, highA] = interval(a);
    const [lowB, highB] = interval(b);
    return lowA <= highB && lowB <= highA;
  }

  // cet.pareto_front: not beaten by another row on every axis and strictly on one (lower is better).
  function markPareto(candidates, axes) {
    for (const row of candidates) {
      row.now.pareto = !candidates.some(
        (other) =>
          other !== row && axes.every((a) => other.now[a] <= row.now[a]) && axes.some((a) => other.now[a] < row.now[a])
      );
    }
  }

  const CLASS_ORDER = ["measured", "projected", "reported"];
  // Measured and estimated-energy runs are one class; projections and published figures are ranked apart from them
  // unless the reader asks for them side by side; approximate rows apart from exact ones unless asked.
  const classOf = (row, s) => (s.projectedTogether ? "" : row.kind === "run" ? "measured" : row.kind);
  const exactnessOf = (row, s) => (s.approximateTogether ? "" : row.group);
  const groupLabel = (row, s) => [classOf(row, s), exactnessOf(row, s)].filter(Boolean).join(" · ") || "all";
  const classIndex = (row, s) => (s.projectedTogether ? 0 : CLASS_ORDER.indexOf(classOf(row, s)));
  const approximateIndex = (row, s) => (s.approximateTogether || row.group === "exact" ? 0 : 1);

  // cet._rank_group: cost basis of the group (the full cost when at least as many feasible rows have it as have an
  // electricity-only cost, else electricity only for all), Pareto among its feasible rows (cost an axis when every
  // one has a full cost), rank by (priority, p50) of the feasible rows with the figure.
  function rankGroup(members, key) {
    const feasible = members.filter((r) => r.now.feasible);
    const count = (column) => feasible.filter((r) => present(r.now[column])).length;
    const full = count("usd_per_million_actions") >= count("usd_per_million_actions_electricity_only");
    const costColumn = full ? "usd_per_million_actions" : "usd_per_million_actions_electricity_only";
    for (const r of members) {
      r.now.cost_basis = present(r.now[costColumn]) ? (full ? "hardware+electricity" : "electricity-only") : null;
      r.now.cost = r.now[costColumn];
    }
    const column = key === "usd_per_million_actions" ? costColumn : key;
    for (const r of members) r.now.key = present(r.now[column]) ? r.now[column] : Infinity;
    const axes = ["latency_p50_ms", "joules_per_action"];
    if (feasible.length && feasible.every((r) => present(r.now.usd_per_million_actions))) {
      axes.push("usd_per_million_actions");
    }
    markPareto(feasible.filter((r) => axes.every((a) => present(r.now[a]))), axes);
    const rankable = feasible.filter((r) => present(r.now[column]));
    rankable.sort((a, b) => a.now[column] - b.now[column] || a.latency_p50_ms - b.latency_p50_ms);
    rankable.forEach((row, i) => {
      const previous = rankable[i - 1];
      const tied = previous !== undefined && bandsOverlap(previous, row, key);
      row.now.rank = tied ? previous.now.rank : i + 1;
      row.now.tiedWith = tied ? previous : null;
      if (tied) previous.now.tied = row.now.tied = true;
    });
  }

  // cet.rank per class: gate every row, rank each group, then order: ranked before unranked, class by class,
  // exact before approximate, by rank, priority figure and p50 (a stable sort keeps the embedded order otherwise).
  function evaluate(s) {
    for (const row of rows) {
      const verdict = gate(row, s);
      const reasons = feasibility(row, s, verdict);
      row.now = {
        ...verdict,
        ...actionCosts(row, s),
        feasible: reasons.length === 0,
        reasons: reasons.join("; "),
        rank: null,
        tied: false,
        tiedWith: null,
        pareto: false,
        group: groupLabel(row, s),
        latency_p50_ms: row.latency_p50_ms,
      };
    }
    const key = PRIORITY_COLUMNS[s.priority];
    const groups = new Map();
    for (const row of rows) {
      const name = row.now.group;
      if (!groups.has(name)) groups.set(name, []);
      groups.get(name).push(row);
    }
    for (const members of groups.values()) rankGroup(members, key);
    const order = (r) => [
      r.now.rank === null ? 1 : 0,
      classIndex(r, s),
      approximateIndex(r, s),
      r.now.rank === null ? Infinity : r.now.rank,
      r.now.key,
      r.latency_p50_ms,
    ];
    return [...rows].sort((a, b) => {
      const x = order(a);
      const y = order(b);
      for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
      return 0;
    });
  }

  function compare(a, b, direction) {
    if (!present(a) && !present(b)) return 0;
    if (!present(a)) return 1; // missing values last in both directions
    if (!present(b)) return -1;
    if (typeof a === "number" && typeof b === "number") return (a - b) * direction;
    return String(a).localeCompare(String(b)) * direction;
  }

  function costText(row) {
    const value = row.now.cost;
    if (!present(value)) return "—";
    return row.now.cost_basis === "electricity-only" ? `${num(value, 4)} elec. only` : num(value, 4);
  }

  function status(row, s) {
    if (!row.now.feasible) return `infeasible: ${row.now.reasons}`;
    const notes = [];
    if (s.priority === "cost" && row.now.cost_basis === "electricity-only") notes.push("no purchase price: electricity only");
    if (!present(figure(row, PRIORITY_COLUMNS[s.priority]))) notes.push(`no ${s.priority} figure: not ranked`);
    const other = row.now.tiedWith;
    if (other) {
      const band = present(row.error_band) ? row.error_band : other.error_band;
      notes.push(`within the ±${Math.round(band * 100)}% band of ${other.device} (${other.backend}): not ranked apart`);
    }
    if (row.p99_note) notes.push(row.p99_note);
    return ["feasible", ...notes].join("; ");
  }

  function deliveredText(row, s) {
    const rate = num(row.now.delivered_action_hz, 4);
    return s.mode === "per-step" ? rate : `${rate} (${s.mode}, ${s.n} per chunk)`;
  }

  const visibleRow = (row) =>
    filters.every((f) => f.value === "" || String(row[f.dataset.key] ?? PAGE_DEFAULTS[f.dataset.key]) === f.value);

  function renderTable(ordered, s) {
    let shown = 0;
    for (const row of ordered) {
      const tr = trById.get(row.id);
      tbody.appendChild(tr);
      const visible = visibleRow(row);
      tr.hidden = !visible;
      shown += visible ? 1 : 0;
      tr.classList.toggle("infeasible", !row.now.feasible);
      const cells = {
        rank: row.now.rank === null ? "—" : String(row.now.rank) + (row.now.tied ? "=" : "") + (row.now.pareto ? " ◆" : ""),
        group: row.now.group,
        status: status(row, s),
        infhz: num(row.now.inference_hz_p50, 4),
        reaction: num(row.now.reaction_ms, 4),
        delivered: deliveredText(row, s),
        jpa: num(row.now.joules_per_action, 4),
        cost: costText(row),
      };
      for (const [name, text] of Object.entries(cells)) tr.querySelector(`.${name}`).textContent = text;
    }
    $("shown").textContent = `${shown} of ${rows.length} rows shown`;
    for (const th of headers) {
      th.classList.toggle("sorted-asc", th.dataset.key === sortKey && sortDir === 1);
      th.classList.toggle("sorted-desc", th.dataset.key === sortKey && sortDir === -1);
    }
  }

  // The matrix: per (model, device) the rows of the first class present (measured, then reported, then projected;
  // every class together when the reader asks); the cell shows the best feasible figures (of every row when none is
  // feasible) and the provenance of the row that is best by the priority.
  function matrixCells(s) {
    const key = PRIORITY_COLUMNS[s.priority];
    const cells = new Map();
    for (const row of rows) {
      const name = `${row.model}\u0000${row.device}`;
      if (!cells.has(name)) cells.set(name, []);
      cells.get(name).push(row);
    }
    const preference = { run: 0, reported: 1, projected: 2 };
    const result = new Map();
    for (const [name, members] of cells) {
      const first = Math.min(...members.map((r) => preference[r.kind]));
      const pool = s.projectedTogether ? members : members.filter((r) => preference[r.kind] === first);
      const feasible = pool.filter((r) => r.now.feasible);
      const judged = feasible.length ? feasible : pool;
      const lowest = (get) => judged.map(get).filter(present).reduce((a, b) => Math.min(a, b), Infinity);
      const best = [...judged].sort(
        (a, b) => compare(figure(a, key), figure(b, key), 1) || a.latency_p50_ms - b.latency_p50_ms
      )[0];
      const cheapest = [...judged]
        .filter((r) => present(r.now.cost))
        .sort((a, b) => Number(a.now.cost_basis === "electricity-only") - Number(b.now.cost_basis === "electricity-only") || a.now.cost - b.now.cost)[0];
      const fastest = [...judged].sort((a, b) => a.latency_p50_ms - b.latency_p50_ms)[0];
      result.set(name, {
        best,
        fastest,
        feasible: feasible.length > 0,
        latency: lowest((r) => r.latency_p50_ms),
        joules: lowest((r) => r.now.joules_per_action),
        cheapest,
        value: feasible.length && present(figure(best, key)) ? figure(best, key) : null,
        count: members.length,
      });
    }
    return result;
  }

  // Per model, the device whose best row's band overlaps the next better device's: not ranked apart from it.
  function matrixTies(cells, key) {
    const ties = new Map();
    const byModel = new Map();
    for (const [name, cell] of cells) {
      if (!present(cell.value)) continue;
      const model = name.split("\u0000")[0];
      if (!byModel.has(model)) byModel.set(model, []);
      byModel.get(model).push([name, cell]);
    }
    for (const members of byModel.values()) {
      members.sort((a, b) => a[1].value - b[1].value);
      members.forEach(([name, cell], i) => {
        const better = members[i - 1];
        if (better && bandsOverlap(better[1].best, cell.best, key)) ties.set(name, better[1].best.device);
      });
    }
    return ties;
  }

  function renderMatrix(s) {
    const table = $("matrix");
    if (!table) return;
    const cells = matrixCells(s);
    const ties = matrixTies(cells, PRIORITY_COLUMNS[s.priority]);
    const logs = Array.from(cells.values(), (c) => c.value)
      .filter((v) => present(v) && v > 0)
      .map(Math.log);
    const low = Math.min(...logs);
    const high = Math.max(...logs);
    const finite = (x) => (Number.isFinite(x) ? x : null);
    for (const td of table.querySelectorAll("td[data-model]")) {
      const cell = cells.get(`${td.dataset.model}\u0000${td.dataset.device}`);
      td.textContent = "";
      td.className = "cell";
      td.style.background = "";
      if (!cell) {
        td.classList.add("empty");
        td.textContent = "·";
        continue;
      }
      const line = (text, cls) => {
        const div = document.createElement("div");
        div.textContent = text;
        if (cls) div.className = cls;
        td.appendChild(div);
      };
      line(cell.feasible ? "✓ feasible" : "✗ infeasible", "verdict");
      const band = cell.fastest.error_band;
      const low = cell.latency * Math.max(0, 1 - band);
      const range = present(band) ? ` (${num(low, 3)}–${num(cell.latency * (1 + band), 3)})` : "";
      line(`${num(finite(cell.latency), 3)} ms${range}`);
      line(`${num(finite(cell.joules), 3)} J/action`);
      line(cell.cheapest ? `$${costText(cell.cheapest)} /1M actions` : "— $/1M actions");
      const badge = document.createElement("span");
      badge.className = `badge badge-${cell.best.provenance}`;
      badge.textContent = cell.best.provenance + (cell.best.error_band_label ? ` ${cell.best.error_band_label}` : "");
      td.appendChild(badge);
      const tie = ties.get(`${td.dataset.model}\u0000${td.dataset.device}`);
      if (tie) line(`≈ ${tie}: bands overlap, not ranked apart`, "tie");
      line(`${cell.count} row${cell.count === 1 ? "" : "s"}`, "more");
      const best = cell.best;
      td.title = `${best.model} · ${best.device} · ${best.backend} ${best.precision} · ${best.optimizations}` +
        (best.now.feasible ? "" : `\n${best.now.reasons}`);
      if (!cell.feasible) td.classList.add("infeasible");
      else if (present(cell.value) && cell.value > 0) {
        const t = high > low ? (Math.log(cell.value) - low) / (high - low) : 0;
        td.style.background = `hsl(${Math.round(120 - 120 * t)}, 65%, 86%)`; // green: best by the priority
      }
    }
  }

  function hover(row) {
    return `${row.model} · ${row.device} · ${row.backend} · ${row.precision} · ${row.optimizations}`;
  }

  // The Pareto charts at the page's target: every feasible row of each group, its front highlighted.
  function renderCharts(s) {
    if (typeof Plotly === "undefined") return;
    const STYLE = ["#d62728", "#ff7f0e", "#1f77b4", "#9467bd", "#2ca02c", "#8c564b"];
    for (const [id, key, axis] of [
      ["chart-energy", "joules_per_action", "J per action"],
      ["chart-cost", "usd_per_million_actions", "$ per 1M actions"],
    ]) {
      const div = $(id);
      if (!div) continue;
      const points = rows.filter((r) => r.now.feasible && present(figure(r, key)) && figure(r, key) > 0 && visibleRow(r));
      const names = [...new Set(points.map((r) => r.now.group))].sort();
      const traces = [];
      names.forEach((name, i) => {
        for (const front of [false, true]) {
          const chosen = points
            .filter((r) => r.now.group === name && r.now.pareto === front)
            .sort((a, b) => a.latency_p50_ms - b.latency_p50_ms);
          if (!chosen.length) continue;
          const open = chosen.map((r) => key === "usd_per_million_actions" && r.now.cost_basis === "electricity-only");
          traces.push({
            type: "scatter",
            x: chosen.map((r) => r.latency_p50_ms),
            y: chosen.map((r) => figure(r, key)),
            mode: front ? "markers+lines" : "markers",
            name: front ? `${name}: Pareto-optimal` : `${name}: feasible`,
            text: chosen.map((r, j) => hover(r) + (open[j] ? " (electricity only)" : "")),
            hovertemplate: "%{text}<br>p50 %{x:.3g} ms<br>%{y:.3g}<extra></extra>",
            marker: {
              size: front ? 12 : 8,
              color: front ? STYLE[i % STYLE.length] : "#9aa5b1",
              symbol: open.map((o) => (front ? "diamond" : "circle") + (o ? "-open" : "")),
            },
            line: { dash: "dot", color: STYLE[i % STYLE.length] },
          });
        }
      });
      const title = `Latency vs ${axis} (feasible at ${pyG(s.controlHz, 6)} Hz, ${s.mode})`;
      const layout = {
        template: window.VLABENCH_TEMPLATE,
        title: { text: points.length ? title : `${title}: no feasible row has this figure` },
        xaxis: { title: { text: "end-to-end p50 latency (ms)" }, type: "log" },
        yaxis: { title: { text: axis }, type: "log" },
        margin: { t: 60, b: 40 },
        autosize: true,
      };
      Plotly.react(div, traces, layout, { responsive: true });
    }
  }

  function render() {
    const s = settings();
    if (!(s.controlHz > 0)) return;
    $("chunk-n").disabled = s.mode === "per-step";
    let ordered = evaluate(s);
    if (sortKey !== null) {
      const value = (r) => (sortKey in r.now ? r.now[sortKey] : r[sortKey]);
      ordered = [...ordered].sort((a, b) => compare(value(a), value(b), sortDir));
    }
    renderTable(ordered, s);
    renderMatrix(s);
    renderCharts(s);
  }

  for (const th of headers) {
    if (!th.dataset.key) continue;
    th.addEventListener("click", () => {
      sortDir = sortKey === th.dataset.key ? -sortDir : 1;
      sortKey = th.dataset.key;
      render();
    });
  }
  $("priority").addEventListener("change", () => {
    sortKey = null; // a new priority shows the ranking again
    render();
  });
  for (const id of ["control-hz", "chunk-n"]) $(id).addEventListener("input", render);
  for (const id of ["execution", "approximate-together", "projected-together"]) $(id).addEventListener("change", render);
  for (const f of filters) f.addEventListener("change", render);
  const matrix = $("matrix");
  if (matrix) {
    matrix.addEventListener("click", (event) => {
      const td = event.target.closest("td[data-model]");
      if (!td || td.classList.contains("empty")) return;
      $("filter-model").value = td.dataset.model;
      $("filter-device").value = td.dataset.device;
      render();
      $("leaderboard").scrollIntoView();
    });
  }
  render();
})();
