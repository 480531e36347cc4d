// The question-first leaderboard: the reader picks a model, a workload, a control rate, an execution model and a
// priority (and the rows kept); the page ranks the devices for that one question, says the answer in one sentence,
// and draws its charts. The gate, the cost and the ranking mirror vlabench/analysis/cet.py (gate, cost_report,
// feasibility, pareto_front, rank) and vlabench/analysis/question.py (rank_question, band_ties) step by step: change
// both together. Every control is in the address (#model=…&hz=…); #row=ID opens a row's question. Data is only ever
// written with textContent, never as HTML.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const PRIORITY_COLUMNS = { cost: "usd_per_million_actions", energy: "joules_per_action", time: "latency_p50_ms" };
  const ELECTRICITY_ONLY = "usd_per_million_actions_electricity_only";
  const OWN_EXECUTION = ["served", "offload"];
  const PROVENANCE_CLASSES = { measured: ["measured", "estimated"], projected: ["projected"], reported: ["reported"] };
  const FIRST_ROWS = 20;
  const PRIORITY_WORDS = { cost: "Cheapest per robot-hour", energy: "Least energy per action", time: "Fastest" };
  let board = null;
  let sortKey = null;
  let sortDir = 1;
  let showAll = false;
  let current = null; // the last evaluated question: {s, ranked, other}
  let plotly = "absent"; // absent | loading | ready

  const present = (x) => x !== null && x !== undefined && !Number.isNaN(x);
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
  const plural = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;
  const workloadKey = (r) => `${r.cameras}-${r.steps}-${r.prompt_tokens}`;
  const workloadText = (key) => {
    const [c, s, p] = key.split("-").map(Number);
    return `${plural(c, "camera")} · ${plural(s, "step")} · ${plural(p, "prompt token")}`;
  };

  async function decode() {
    const binary = atob(window.VLABENCH_BOARD);
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    const data = JSON.parse(await new Response(stream).text());
    data.rows = data.rows.map((values) => Object.fromEntries(data.columns.map((c, i) => [c, values[i]])));
    for (const r of data.rows) if (r.latency_p99_ms === null) r.latency_p99_ms = r.latency_p50_ms; // pages.page_value
    return data;
  }

  // ---- the question ------------------------------------------------------------------------------------------

  function numberOr(id, fallback) {
    const value = Number($(id).value);
    return $(id).value !== "" && Number.isFinite(value) ? value : fallback;
  }

  function settings() {
    const n = Number($("chunk-n").value);
    const provenance = Object.keys(PROVENANCE_CLASSES).filter((name) => $(`prov-${name}`).checked);
    return {
      model: $("model").value,
      workload: $("workload").value,
      priority: $("priority").value,
      controlHz: Number($("control-hz").value),
      mode: $("execution").value,
      n: Number.isInteger(n) && n >= 1 ? n : 1,
      deviceClass: $("device-class").value,
      deployment: $("deployment").value,
      provenance,
      approximateTogether: $("approximate-together").checked,
      otherWorkloads: $("other-workloads").checked,
      duty: numberOr("duty", null) === null ? null : numberOr("duty", null) / 100,
      kwh: numberOr("kwh", null),
      life: numberOr("life", null),
    };
  }

  const keeps = (r, s) =>
    (s.deviceClass === "" || r.device_class === s.deviceClass) &&
    (s.deployment === "" || (r.deployment || "on-robot") === s.deployment) &&
    s.provenance.some((name) => PROVENANCE_CLASSES[name].includes(r.provenance));

  // question.rank_question: on-robot rows under the question's execution, served and offload rows under their own.
  function rowExecution(r, s) {
    if (OWN_EXECUTION.includes(r.deployment)) {
      const mode = r.execution || "per-step";
      return { mode, n: mode === "per-step" ? 1 : r.actions_per_chunk };
    }
    return { mode: s.mode, n: s.mode === "per-step" ? 1 : s.n };
  }
  const actionsPerInference = (ex) => (ex.mode === "per-step" ? 1 : ex.n);

  // execution.delivered_hz
  function deliveredHz(latencyMs, hz, ex) {
    const seconds = latencyMs / 1000.0;
    if (ex.mode === "per-step") return Math.min(hz, 1.0 / seconds);
    if (ex.mode === "sync") return ex.n / (ex.n / hz + seconds);
    return Math.min(hz, ex.n / seconds);
  }

  // execution.gate
  function gate(r, hz, ex) {
    const p99 = r.latency_p99_ms;
    const periodMs = 1000.0 / hz;
    const budgetMs = periodMs * (ex.mode === "async" ? ex.n : 1);
    const meets = p99 <= budgetMs;
    const reasons = {
      "per-step": () => `${pyG(1000.0 / p99, 3)} inferences/s at p99 < ${pyG(hz, 6)} Hz`,
      sync: () =>
        `p99 latency ${pyG(p99, 4)} ms pauses the robot longer than one control period (${pyG(periodMs, 4)} ms) per chunk`,
      async: () => `p99 latency ${pyG(p99, 4)} ms > the chunk's ${ex.n} actions at ${pyG(hz, 6)} Hz (${pyG(budgetMs, 4)} ms)`,
    };
    return {
      meets,
      reason: meets ? null : reasons[ex.mode](),
      inference_hz_p50: 1000.0 / r.latency_p50_ms,
      reaction_ms: p99,
      delivered_action_hz: deliveredHz(r.latency_p50_ms, hz, ex),
    };
  }

  // cet.shared
  const shared = (r, key) => (present(r[key]) && r[key] > 0 ? r[key] : 1.0);

  // served_cost.served_load: what a served window measured (null for a row that was not served)
  const SERVED = ["served_robots", "served_window_s", "served_busy_s", "served_requests", "served_batches"];
  const servedLoad = (r) =>
    [...SERVED, "served_actions", "served_joules"].every((key) => present(r[key]) && Number.isFinite(r[key])) ? r : null;

  // cet.cost_report: [$ per robot-hour, $ per 1M actions] at the delivered action rate, or from a served window.
  function costReport(r, s, ex, price) {
    const lifetime = s.life === null ? r.lifetime_years : s.life;
    const duty = s.duty === null ? r.duty_cycle : s.duty;
    const kwhPrice = s.kwh === null ? r.electricity_usd_per_kwh : s.kwh;
    const served = servedLoad(r);
    let robots, actionsPerHour, joules;
    if (served) {
      robots = served.served_robots;
      actionsPerHour = (served.served_actions / served.served_window_s) * 3600.0 / robots;
      joules = (served.served_joules / served.served_window_s) * 3600.0 / robots;
    } else {
      robots = shared(r, "robots_per_device");
      actionsPerHour = deliveredHz(r.latency_p50_ms, s.controlHz, ex) * 3600.0;
      const inferencesPerHour = actionsPerHour / actionsPerInference(ex) / shared(r, "rows_per_inference");
      const busy = Math.min(3600.0, (inferencesPerHour * r.latency_p50_ms) / 1000.0);
      const idle = Math.max(0.0, 3600.0 / robots - busy);
      joules = inferencesPerHour * r.joules_per_inference + idle * r.idle_w;
    }
    const electricity = (joules / 3.6e6) * kwhPrice;
    const hardware = price === null ? null : price / (lifetime * 8760.0 * duty) / robots;
    const total = hardware === null ? electricity : hardware + electricity;
    return [total, (total / actionsPerHour) * 1e6];
  }

  // cet.action_costs
  function actionCosts(r, s, ex) {
    const none = { joules_per_action: null, usd_per_million_actions: null, [ELECTRICITY_ONLY]: null };
    if (!present(r.joules_per_inference)) {
      return { ...none, usd_per_robot_hour: null, usd_per_robot_hour_electricity_only: null };
    }
    const finite = (x) => (Number.isFinite(x) ? x : null); // NaN (no idle power) is no figure, as in pandas
    const price = present(r.price_usd) ? r.price_usd : null;
    const full = price === null ? [null, null] : costReport(r, s, ex, price);
    const electricity = costReport(r, s, ex, null);
    return {
      joules_per_action: servedLoad(r)
        ? r.served_joules / r.served_actions
        : r.joules_per_inference / actionsPerInference(ex) / shared(r, "rows_per_inference"),
      usd_per_million_actions: finite(full[1]),
      [ELECTRICITY_ONLY]: finite(electricity[1]),
      usd_per_robot_hour: finite(full[0]),
      usd_per_robot_hour_electricity_only: finite(electricity[0]),
    };
  }

  // cet.feasibility
  function feasibility(r, ex, verdict) {
    const reasons = [];
    if (present(r.device_memory_gb) && r.memory_needed_gb > r.device_memory_gb) {
      const plate = r.device_memory_nameplate_gb;
      const shown = present(plate) && plate !== r.device_memory_gb ? ` (${pyG(plate, 6)} GB nameplate)` : "";
      reasons.push(`needs ${r.memory_needed_gb.toFixed(1)} GB > ${pyG(r.device_memory_gb, 6)} GB usable memory${shown}`);
    }
    if (ex.mode !== "per-step" && present(r.chunk) && ex.n > r.chunk) {
      reasons.push(`executes ${ex.n} actions per chunk, the model predicts ${Math.trunc(r.chunk)}`);
    }
    if (!verdict.meets) reasons.push(verdict.reason);
    if (!r.valid) reasons.push(r.invalid_reason || "failed the correctness gate");
    return reasons;
  }

  // question.figure: cost on the basis the row's group is ranked on.
  const figureOf = (r, priority) =>
    priority === "cost" && r.now.cost_basis === "electricity-only" ? r.now[ELECTRICITY_ONLY] : r.now[PRIORITY_COLUMNS[priority]];

  // question.bands_overlap
  function bandsOverlap(a, b, priority) {
    if (!present(a.error_band) && !present(b.error_band)) return false;
    const interval = (r) => {
      const value = figureOf(r, priority);
      const band = present(r.error_band) ? r.error_band : 0.0;
      return [value * Math.max(0.0, 1 - band), value * (1 + band)];
    };
    const [lowA, highA] = interval(a);
    const [lowB, highB] = interval(b);
    return lowA <= highB && lowB <= highA;
  }

  // cet.pareto_front
  function paretoFlags(members, axes, get) {
    return members.map(
      (r) =>
        !members.some(
          (o) => o !== r && axes.every((a) => get(o, a) <= get(r, a)) && axes.some((a) => get(o, a) < get(r, a))
        )
    );
  }

  // cet._rank_group, then question.band_ties
  function rankGroup(members, s) {
    const feasible = members.filter((r) => r.now.feasible);
    const count = (column) => feasible.filter((r) => present(r.now[column])).length;
    const full = count("usd_per_million_actions") >= count(ELECTRICITY_ONLY);
    const costColumn = full ? "usd_per_million_actions" : ELECTRICITY_ONLY;
    for (const r of members) r.now.cost_basis = present(r.now[costColumn]) ? (full ? "hardware+electricity" : "electricity-only") : null;
    const key = s.priority === "cost" ? costColumn : PRIORITY_COLUMNS[s.priority];
    for (const r of members) r.now.key = present(r.now[key]) ? r.now[key] : Infinity;
    const axes = ["latency_p50_ms", "joules_per_action"];
    if (feasible.length && feasible.every((r) => present(r.now.usd_per_million_actions))) axes.push("usd_per_million_actions");
    const comparable = feasible.filter((r) => axes.every((a) => present(r.now[a])));
    paretoFlags(comparable, axes, (r, a) => r.now[a]).forEach((flag, i) => (comparable[i].now.pareto = flag));
    const rankable = feasible.filter((r) => present(r.now[key]));
    rankable.sort((a, b) => a.now[key] - b.now[key] || a.latency_p50_ms - b.latency_p50_ms);
    rankable.forEach((r, i) => {
      const previous = rankable[i - 1];
      const same =
        previous !== undefined &&
        figureOf(previous, s.priority) === figureOf(r, s.priority) &&
        previous.latency_p50_ms === r.latency_p50_ms;
      const tied = previous !== undefined && (same || bandsOverlap(previous, r, s.priority));
      r.now.rank = tied ? previous.now.rank : i + 1;
      if (tied) {
        previous.now.tied = r.now.tied = true;
        r.now.tiedWith = previous;
      }
    });
  }

  // question.rank_question over the rows the reader keeps; cet.rank's order: ranked rows (exact, then approximate,
  // by rank, figure and p50), then the unranked ones by figure and p50 (stable).
  function evaluate(s) {
    const members = [];
    const other = [];
    for (const r of board.rows) {
      if (r.model !== s.model || !keeps(r, s)) continue;
      (workloadKey(r) === s.workload ? members : other).push(r);
    }
    for (const r of members) {
      const ex = rowExecution(r, s);
      const verdict = gate(r, s.controlHz, ex);
      const reasons = feasibility(r, ex, verdict);
      r.now = {
        ...verdict,
        ...actionCosts(r, s, ex),
        execution: ex,
        feasible: reasons.length === 0,
        reasons: reasons.join("; "),
        rank: null,
        tied: false,
        tiedWith: null,
        pareto: false,
        group: s.approximateTogether ? "all" : r.approximate ? "approximate" : "exact",
        latency_p50_ms: r.latency_p50_ms,
      };
    }
    const groups = new Map();
    for (const r of members) {
      if (!groups.has(r.now.group)) groups.set(r.now.group, []);
      groups.get(r.now.group).push(r);
    }
    for (const group of groups.values()) rankGroup(group, s);
    const order = (r) => [
      r.now.rank === null ? 1 : 0,
      s.approximateTogether ? 0 : r.approximate ? 1 : 0,
      r.now.rank === null ? Infinity : r.now.rank,
      r.now.key,
      r.latency_p50_ms,
    ];
    const ranked = [...members].sort((a, b) => {
      const x = order(a);
      const y = order(b);
      for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
      return 0;
    });
    return { s, ranked, other };
  }

  // ---- what the page says --------------------------------------------------------------------------------------

  const dollars = (x) => (present(x) ? `$${pyG(x, 3)}` : "—");
  function perHour(r) {
    if (r.now.cost_basis === "electricity-only") return `${dollars(r.now.usd_per_robot_hour_electricity_only)} elec. only`;
    return present(r.now.usd_per_robot_hour) ? dollars(r.now.usd_per_robot_hour) : dollars(r.now.usd_per_robot_hour_electricity_only) + (present(r.now.usd_per_robot_hour_electricity_only) ? " elec. only" : "");
  }
  function perMillion(r) {
    const value = r.now.cost_basis === "electricity-only" ? r.now[ELECTRICITY_ONLY] : r.now.usd_per_million_actions;
    if (!present(value)) return present(r.now[ELECTRICITY_ONLY]) ? `${num(r.now[ELECTRICITY_ONLY], 4)} elec. only` : "—";
    return r.now.cost_basis === "electricity-only" ? `${num(value, 4)} elec. only` : num(value, 4);
  }
  const executionText = (ex) => (ex.mode === "per-step" ? "per step" : `${ex.mode}, ${ex.n} actions per inference`);
  function provenanceText(r) {
    const parts = [r.provenance];
    if (present(r.error_band)) parts.push(`±${Math.round(r.error_band * 100)}%`);
    if (r.calibration) parts.push(r.calibration);
    if (present(r.band_coverage)) parts.push(`coverage ${Math.round(r.band_coverage * 100)}%` + (r.band_basis ? ` (${r.band_basis})` : ""));
    return parts.join(" ");
  }
  function deploymentText(r) {
    if (!r.deployment || r.deployment === "on-robot") return "";
    return r.deployment === "offload" ? `offload ×${r.robots} via ${r.offload_server}` : `served ×${r.robots}`;
  }
  function stackText(r) {
    const parts = [`${r.backend} · ${r.precision}`];
    if (r.optimizations && r.optimizations !== "none") parts.push(r.optimizations);
    if (r.approximate) parts.push(`≈ approximate${present(r.action_error) ? `, action error ${pyG(r.action_error, 3)}` : ""}`);
    if (!r.valid) parts.push(`action error ${present(r.action_error) ? pyG(r.action_error, 3) : r.action_error_note || "—"} ✗`);
    return parts.join(" · ");
  }
  const deviceName = (r) => `${r.device}${deploymentText(r) ? ` (${deploymentText(r)})` : ""}`;

  function status(r, s) {
    if (!r.now.feasible) return `infeasible: ${r.now.reasons}`;
    const notes = ["feasible"];
    if (s.priority === "cost" && r.now.cost_basis === "electricity-only") notes.push("no purchase price: electricity only");
    if (!present(figureOf(r, s.priority))) notes.push(`no ${s.priority} figure: not ranked`);
    const other = r.now.tiedWith;
    if (other) {
      if (present(r.error_band) || present(other.error_band)) {
        const band = present(r.error_band) ? r.error_band : other.error_band;
        notes.push(`within the ±${Math.round(band * 100)}% band of ${other.device} (${other.backend}): not ranked apart`);
      } else notes.push(`the same figure as ${other.device} (${other.backend})`);
    }
    if (OWN_EXECUTION.includes(r.deployment)) notes.push(`gated ${executionText(r.now.execution)}, as its robots asked`);
    if (r.serving_note) notes.push(r.serving_note);
    if (r.p99_note) notes.push(r.p99_note);
    if (r.kind === "reported") notes.push(`source: ${r.source}`);
    if (r.assumed && r.assumed.length) notes.push(`not stated by the source: ${r.assumed.join(", ")}`);
    return notes.join("; ");
  }

  function answer(q) {
    const s = q.s;
    const hz = `${pyG(s.controlHz, 6)} Hz ${executionText({ mode: s.mode, n: s.n })}`;
    const scope = `${s.model} (${workloadText(s.workload)})${s.deviceClass ? `, ${s.deviceClass} devices` : ""}`;
    const first = q.ranked.filter((r) => r.now.rank === 1 && (s.approximateTogether || !r.approximate));
    const winner = first[0];
    if (!q.ranked.length) return `No row answers ${scope} with the rows kept.`;
    if (!winner) {
      const fastest = [...q.ranked].sort((a, b) => a.latency_p99_ms - b.latency_p99_ms)[0];
      return `No ${s.approximateTogether ? "" : "exact "}row of ${scope} is feasible at ${hz}; the fastest, ${deviceName(fastest)}, ${fastest.backend} ${fastest.precision}, has a ${num(fastest.latency_p99_ms, 3)} ms p99.`;
    }
    const label = `${provenanceText(winner)}`;
    const latency = winner.kind === "run" ? `${num(winner.latency_p99_ms, 3)} ms p99` : `${num(winner.latency_p50_ms, 3)} ms (${winner.provenance} latency, no p99)`;
    let text = `${PRIORITY_WORDS[s.priority]} for ${scope} at ${hz}: ${deviceName(winner)}, ${winner.backend} ${winner.precision} (${label}): ${latency}, ${perHour(winner)} per robot-hour, ${num(winner.now.joules_per_action, 3)} J per action`;
    if (first.length > 1) {
      const devices = new Set(first.map((r) => r.device)).size;
      text += `; ${plural(first.length, "row")} (${plural(devices, "device")}) share rank 1: equal figures or overlapping bands`;
    }
    const approximate = q.ranked.find((r) => r.approximate && r.now.rank === 1 && !s.approximateTogether);
    if (approximate) text += `; best approximate row (ranked apart): ${deviceName(approximate)}, ${approximate.backend} ${approximate.precision}`;
    return `${text}.`;
  }

  function note(q) {
    const s = q.s;
    const canonical = board.canonical[s.model];
    const key = canonical ? `${canonical.cameras}-${canonical.steps}-${canonical.prompt_tokens}` : null;
    const why = board.own_workload[s.model] ? "the model's own workload (its spec's defaults)" : "the workload with the most rows";
    const workloadNote = key === s.workload ? `Workload: ${workloadText(s.workload)}, ${why}.` : `Workload: ${workloadText(s.workload)} (the default is ${workloadText(key)}).`;
    const others = new Set(q.other.map(workloadKey)).size;
    const otherNote = others ? ` ${plural(q.other.length, "row")} of ${plural(others, "other workload")} not ranked here${s.otherWorkloads ? " (listed below)" : ""}.` : "";
    return `${workloadNote}${otherNote} ${plural(q.ranked.length, "row")} in this question.`;
  }

  // ---- rendering --------------------------------------------------------------------------------------------

  function cell(tr, text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    if (text !== null) td.textContent = text;
    tr.appendChild(td);
    return td;
  }
  function link(parent, href, text, className) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    if (className) a.className = className;
    parent.appendChild(a);
    return a;
  }

  function sortValue(r, key) {
    if (key === "usd_per_robot_hour") return r.now.cost_basis === "electricity-only" ? r.now.usd_per_robot_hour_electricity_only : r.now.usd_per_robot_hour;
    return key in r.now ? r.now[key] : r[key];
  }
  function compare(a, b, direction) {
    if (!present(a) && !present(b)) return 0;
    if (!present(a)) return 1; // missing values last in both directions
    if (!present(b)) return -1;
    if (typeof a === "number" && typeof b === "number") return (a - b) * direction;
    return String(a).localeCompare(String(b)) * direction;
  }

  function renderTable(q, highlight) {
    const tbody = $("leaderboard").tBodies[0];
    tbody.textContent = "";
    let ordered = q.ranked;
    if (sortKey !== null) ordered = [...ordered].sort((a, b) => compare(sortValue(a, sortKey), sortValue(b, sortKey), sortDir));
    const limit = showAll || ordered.length <= FIRST_ROWS + 5 ? ordered.length : FIRST_ROWS;
    ordered.slice(0, limit).forEach((r) => {
      const tr = document.createElement("tr");
      tr.id = `row-${r.id}`;
      tr.dataset.id = r.id;
      tr.className = [r.now.feasible ? "" : "infeasible", r.kind === "run" ? "" : r.kind, r.id === highlight ? "target" : ""].join(" ").trim();
      const rank = r.now.rank === null ? "—" : `${r.now.rank}${r.now.tied ? "=" : ""}${r.approximate && !q.s.approximateTogether ? " ≈" : ""}${r.now.pareto ? " ◆" : ""}`;
      cell(tr, rank, "num rank");
      const device = cell(tr, null, "device");
      link(device, `#row=${encodeURIComponent(r.id)}`, "¶", "permalink").setAttribute("aria-label", `link to this row (${r.device}, ${r.backend})`);
      device.appendChild(document.createTextNode(" "));
      link(device, r.device_page, r.device);
      const extra = [r.device_class, deploymentText(r)].filter(Boolean).join(" · ");
      if (extra) {
        const span = document.createElement("span");
        span.className = "sub";
        span.textContent = extra;
        device.appendChild(span);
      }
      const stack = cell(tr, null, "stack");
      if (r.page) link(stack, r.page, stackText(r));
      else stack.textContent = stackText(r);
      cell(tr, num(r.latency_p50_ms, 4), "num p50");
      cell(tr, r.kind === "run" ? num(r.now.reaction_ms, 4) : "—", "num p99");
      cell(tr, perHour(r), "num hour");
      cell(tr, num(r.now.joules_per_action, 4), "num jpa");
      cell(tr, perMillion(r), "num cost");
      const provenance = cell(tr, null, "provenance");
      const badge = document.createElement("span");
      badge.className = `badge badge-${r.provenance}`;
      badge.textContent = provenanceText(r);
      provenance.appendChild(badge);
      cell(tr, status(r, q.s), "status");
      tbody.appendChild(tr);
    });
    const button = $("show-all");
    button.hidden = limit === ordered.length && !showAll;
    button.textContent = showAll ? `Show the first ${FIRST_ROWS} rows` : `Show all ${ordered.length} rows`;
    $("shown").textContent = `${limit} of ${ordered.length} rows shown`;
    for (const b of document.querySelectorAll("#leaderboard thead button")) {
      const th = b.parentElement;
      const sorted = b.dataset.key === sortKey;
      th.setAttribute("aria-sort", sorted ? (sortDir === 1 ? "ascending" : "descending") : "none");
    }
  }

  function renderOther(q) {
    const section = $("other");
    section.hidden = !(q.s.otherWorkloads && q.other.length);
    const tbody = $("other-rows").tBodies[0];
    tbody.textContent = "";
    if (section.hidden) return;
    for (const r of [...q.other].sort((a, b) => workloadKey(a).localeCompare(workloadKey(b)) || a.latency_p50_ms - b.latency_p50_ms)) {
      const tr = document.createElement("tr");
      cell(tr, workloadText(workloadKey(r)));
      cell(tr, deviceName(r));
      cell(tr, stackText(r));
      cell(tr, num(r.latency_p50_ms, 4), "num");
      cell(tr, provenanceText(r) + (r.source ? `; source: ${r.source}` : ""));
      tbody.appendChild(tr);
    }
  }

  // ---- charts (plotly's basic bundle, loaded when the charts come into view) -----------------------------------

  function loadPlotly() {
    if (plotly !== "absent") return;
    plotly = "loading";
    const load = (src) =>
      new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = src;
        script.onload = resolve;
        script.onerror = reject;
        document.head.appendChild(script);
      });
    load("assets/plotly-basic.min.js")
      .then(() => load("assets/plot-template.js"))
      .then(() => {
        plotly = "ready";
        if (current) renderCharts(current);
      });
  }

  const MARKERS = { measured: "circle", estimated: "circle", projected: "diamond", reported: "square" };
  const COLORS = { measured: "#1a7f37", estimated: "#9a6700", projected: "#0550ae", reported: "#8250df" };

  function errorX(rows) {
    return {
      type: "data",
      symmetric: false,
      array: rows.map((r) => (present(r.error_band) ? r.latency_p50_ms * r.error_band : r.kind === "run" ? r.now.reaction_ms - r.latency_p50_ms : 0)),
      arrayminus: rows.map((r) => (present(r.error_band) ? r.latency_p50_ms * r.error_band : 0)),
      thickness: 1,
    };
  }

  function scatter(div, q, value, axis) {
    const points = q.ranked.filter((r) => r.now.feasible && present(value(r)) && value(r) > 0);
    const traces = [];
    for (const kind of Object.keys(COLORS)) {
      const chosen = points.filter((r) => r.provenance === kind);
      if (!chosen.length) continue;
      traces.push({
        type: "scatter",
        mode: "markers",
        name: kind,
        x: chosen.map((r) => r.latency_p50_ms),
        y: chosen.map(value),
        text: chosen.map((r) => `${deviceName(r)} · ${r.backend} ${r.precision}`),
        hovertemplate: "%{text}<br>p50 %{x:.3g} ms<br>%{y:.3g}<extra></extra>",
        marker: { symbol: MARKERS[kind], color: COLORS[kind], size: 9 },
        error_x: errorX(chosen),
        error_y: { type: "data", array: chosen.map((r) => (present(r.error_band) ? value(r) * r.error_band : 0)), thickness: 1 },
      });
    }
    const flags = paretoFlags(points, [0, 1], (r, a) => (a === 0 ? r.latency_p50_ms : value(r)));
    const front = points.filter((_, i) => flags[i]).sort((a, b) => a.latency_p50_ms - b.latency_p50_ms);
    if (front.length) {
      traces.push({
        type: "scatter",
        mode: "lines",
        name: "Pareto front",
        x: front.map((r) => r.latency_p50_ms),
        y: front.map(value),
        line: { dash: "dot", color: "#24292f" },
        hoverinfo: "skip",
      });
    }
    const title = `${q.s.model}: latency vs ${axis}, feasible at ${pyG(q.s.controlHz, 6)} Hz`;
    Plotly.react(
      div,
      traces,
      {
        template: window.VLABENCH_TEMPLATE,
        title: { text: points.length ? title : `${title}: no feasible row has this figure` },
        xaxis: { title: { text: "p50 latency (ms)" }, type: "log" },
        yaxis: { title: { text: axis }, type: "log" },
        margin: { t: 50, b: 40, l: 60, r: 10 },
        legend: { orientation: "h" },
        autosize: true,
      },
      { responsive: true, displayModeBar: false }
    );
  }

  function phaseBars(div, q) {
    const chosen = q.ranked.filter((r) => r.now.rank !== null && r.phases && Object.keys(r.phases).length).slice(0, 12);
    const names = chosen.map((r) => `${r.now.rank}. ${r.device} ${r.backend} ${r.precision}${deploymentText(r) ? ` ${deploymentText(r)}` : ""}`);
    const colors = { vision: "#0969da", prefill: "#bc4c00", action: "#cf222e" };
    const traces = Object.keys(colors).map((phase) => ({
      type: "bar",
      name: `${phase} p50`,
      x: names,
      y: chosen.map((r) => (r.phases[phase] ? r.phases[phase][0] : null)),
      marker: { color: colors[phase] },
    }));
    traces.push({
      type: "scatter",
      mode: "markers",
      name: "end to end p50 (bars: band, or up to p99)",
      x: names,
      y: chosen.map((r) => r.latency_p50_ms),
      marker: { symbol: "line-ew-open", size: 14, color: "#24292f" },
      error_y: errorX(chosen),
    });
    Plotly.react(
      div,
      traces,
      {
        template: window.VLABENCH_TEMPLATE,
        barmode: "stack",
        title: { text: chosen.length ? "Phases of the ranked devices (p50), end to end with its p99 or band" : "No ranked row has phases" },
        yaxis: { title: { text: "latency (ms)" } },
        margin: { t: 50, b: 120, l: 60, r: 10 },
        legend: { orientation: "h" },
        autosize: true,
      },
      { responsive: true, displayModeBar: false }
    );
  }

  function renderCharts(q) {
    if (plotly !== "ready") return;
    scatter($("chart-energy"), q, (r) => r.now.joules_per_action, "J per action");
    scatter($("chart-cost"), q, (r) => (r.now.cost_basis === "electricity-only" ? r.now.usd_per_robot_hour_electricity_only : r.now.usd_per_robot_hour), "$ per robot-hour");
    phaseBars($("chart-phases"), q);
  }

  // ---- the address --------------------------------------------------------------------------------------------

  const FIELDS = {
    model: "model", workload: "workload", hz: "control-hz", exec: "execution", n: "chunk-n", by: "priority",
    class: "device-class", deploy: "deployment", duty: "duty", kwh: "kwh", life: "life", q: "search",
  };
  const CHECKS = { measured: "prov-measured", projected: "prov-projected", reported: "prov-reported", approx: "approximate-together", other: "other-workloads" };
  const CHECK_DEFAULTS = { measured: true, projected: true, reported: true, approx: false, other: false };

  function writeAddress() {
    const params = new URLSearchParams();
    for (const [name, id] of Object.entries(FIELDS)) if ($(id).value !== "") params.set(name, $(id).value);
    for (const [name, id] of Object.entries(CHECKS)) if ($(id).checked !== CHECK_DEFAULTS[name]) params.set(name, $(id).checked ? "1" : "0");
    if (sortKey !== null) params.set("sort", `${sortKey}:${sortDir}`);
    if (showAll) params.set("all", "1");
    history.replaceState(null, "", `#${params.toString()}`);
  }

  function fillWorkloads(model, wanted) {
    const counts = new Map();
    for (const r of board.rows) if (r.model === model) counts.set(workloadKey(r), (counts.get(workloadKey(r)) || 0) + 1);
    const canonical = board.canonical[model];
    const key = canonical ? `${canonical.cameras}-${canonical.steps}-${canonical.prompt_tokens}` : null;
    const select = $("workload");
    select.textContent = "";
    for (const [workload, count] of [...counts].sort((a, b) => (a[0] === key ? -1 : b[0] === key ? 1 : b[1] - a[1]))) {
      const option = document.createElement("option");
      option.value = workload;
      option.textContent = `${workloadText(workload)} (${plural(count, "row")})${workload === key ? ", default" : ""}`;
      select.appendChild(option);
    }
    select.value = counts.has(wanted) ? wanted : key;
  }

  function readAddress() {
    const params = new URLSearchParams(location.hash.slice(1));
    const row = params.get("row") && board.rows.find((r) => r.id === params.get("row"));
    if (row) {
      $("model").value = row.model;
      fillWorkloads(row.model, workloadKey(row));
      for (const id of ["device-class", "deployment", "search"]) $(id).value = "";
      for (const name of ["measured", "projected", "reported"]) $(CHECKS[name]).checked = true;
      showAll = true;
      return row.id;
    }
    for (const [name, id] of Object.entries(FIELDS)) if (params.has(name) && name !== "workload") $(id).value = params.get(name);
    for (const [name, id] of Object.entries(CHECKS)) $(id).checked = params.has(name) ? params.get(name) === "1" : CHECK_DEFAULTS[name];
    if (!board.canonical[$("model").value]) $("model").value = board.default_model;
    fillWorkloads($("model").value, params.get("workload"));
    const sort = (params.get("sort") || "").split(":");
    sortKey = sort.length === 2 ? sort[0] : null;
    sortDir = sort[1] === "-1" ? -1 : 1;
    showAll = params.get("all") === "1";
    return null;
  }

  // ---- search -------------------------------------------------------------------------------------------------

  function renderSearch() {
    const list = $("search-results");
    const words = $("search").value.toLowerCase().split(/\s+/).filter(Boolean);
    list.textContent = "";
    list.hidden = !words.length;
    if (!words.length) return;
    const text = (r) => `${r.model} ${r.device} ${r.device_class || ""} ${r.backend} ${r.precision} ${r.provenance} ${r.deployment || ""}`.toLowerCase();
    const found = board.rows.filter((r) => words.every((w) => text(r).includes(w)));
    for (const r of found.slice(0, 12)) {
      const li = document.createElement("li");
      link(li, `#row=${encodeURIComponent(r.id)}`, `${r.model} (${workloadText(workloadKey(r))}) · ${deviceName(r)} · ${r.backend} ${r.precision} · ${r.provenance}`);
      list.appendChild(li);
    }
    const li = document.createElement("li");
    li.textContent = found.length > 12 ? `${found.length} rows match; the first 12 are listed` : `${plural(found.length, "row")} match`;
    list.appendChild(li);
  }

  // ---- wiring -----------------------------------------------------------------------------------------------

  function render(highlight) {
    const s = settings();
    if (!(s.controlHz > 0)) return;
    $("chunk-n").disabled = s.mode === "per-step";
    current = evaluate(s);
    $("answer").textContent = answer(current);
    $("question-note").textContent = note(current);
    $("ranking-title").textContent = `Devices ranked for ${s.model}, ${workloadText(s.workload)}`;
    renderTable(current, highlight);
    renderOther(current);
    renderCharts(current);
    renderSearch();
    document.body.dataset.ready = "yes";
  }

  function changed() {
    writeAddress();
    render(null);
  }

  function open() {
    const highlight = readAddress();
    render(highlight);
    if (highlight) {
      const tr = $(`row-${highlight}`);
      if (tr) tr.scrollIntoView({ block: "center" });
      writeAddress();
    }
  }

  async function start() {
    board = await decode();
    const models = [...new Set(board.rows.map((r) => r.model))].sort();
    const measured = new Map();
    for (const r of board.rows) if (r.kind === "run") measured.set(r.model, (measured.get(r.model) || 0) + 1);
    board.default_model = [...measured].sort((a, b) => b[1] - a[1])[0]?.[0] || models[0];
    for (const model of models) {
      const option = document.createElement("option");
      option.value = option.textContent = model;
      $("model").appendChild(option);
    }
    $("model").value = board.default_model;
    for (const name of [...new Set(board.rows.map((r) => r.device_class).filter(Boolean))].sort()) {
      const option = document.createElement("option");
      option.value = option.textContent = name;
      $("device-class").appendChild(option);
    }
    $("model").addEventListener("change", () => {
      fillWorkloads($("model").value, null);
      changed();
    });
    for (const id of ["workload", "execution", "priority", "device-class", "deployment"]) $(id).addEventListener("change", changed);
    for (const id of ["control-hz", "chunk-n", "duty", "kwh", "life"]) $(id).addEventListener("input", changed);
    for (const id of Object.values(CHECKS)) $(id).addEventListener("change", changed);
    $("search").addEventListener("input", () => {
      writeAddress();
      renderSearch();
    });
    $("show-all").addEventListener("click", () => {
      showAll = !showAll;
      changed();
    });
    for (const button of document.querySelectorAll("#leaderboard thead button")) {
      button.addEventListener("click", () => {
        sortDir = sortKey === button.dataset.key ? -sortDir : 1;
        sortKey = button.dataset.key;
        changed();
      });
    }
    $("priority").addEventListener("change", () => {
      sortKey = null; // a new priority shows the ranking again
      changed();
    });
    window.addEventListener("hashchange", open);
    open();
    const charts = $("charts");
    if ("IntersectionObserver" in window) {
      new IntersectionObserver((entries, observer) => {
        if (entries.some((e) => e.isIntersecting)) {
          observer.disconnect();
          loadPlotly();
        }
      }, { rootMargin: "200px" }).observe(charts);
    } else loadPlotly();
  }

  start();
})();
