/* Compare page: 2 to 5 jobs' curves overlaid, and a table of their parameters and final metrics. */
"use strict";

(() => {
  const { api, el, clear } = ST;
  /* Per-worker step figures of the gradient-sharing panel, and the run's counters and totals (one number per worker,
   * as single points they made charts of nothing): not overlaid. */
  const SKIP = new Set(["samples_per_s", "tau", "sparsity", "wire_bytes", "bytes", "codec_bytes", "dense_bytes",
    "residual_norm", "collective", "clipped_mass", "wire_bytes_sent", "wire_bytes_total", "wire_bytes_per_step",
    "wire_compression", "codec_compression", "dense_steps", "clipped_mass_total", "step_events_dropped"]);
  const skipped = (k) => SKIP.has(k) || k.startsWith("phase_") || k.startsWith("residual_") || k.endsWith("_total");
  const MAX_CHARTS = 12;

  function idsFromUrl() {
    const raw = new URLSearchParams(location.search).get("ids") || "";
    return [...new Set(raw.split(/[\s,]+/).filter(Boolean))];
  }

  function label(job) {
    return (job.name || job.type) + " · " + job.id.slice(0, 8);
  }

  function flatten(value, prefix, out) {
    if (value && typeof value === "object" && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) flatten(v, prefix ? prefix + "." + k : k, out);
    } else if (prefix) {
      out[prefix] = Array.isArray(value) ? JSON.stringify(value) : value;
    }
    return out;
  }

  function curve(points, key) {
    const list = points.filter((p) => p.key === key);
    const byEpoch = list.some((p) => p.epoch !== null && p.epoch !== undefined);
    return { byEpoch, xy: Charts.groupMean(list, (p) => (byEpoch ? p.epoch : p.step)) };
  }

  /* A chart per metric every job reports (loss first), each job in its own colour in every chart; the page says
   * which metrics it leaves out. */
  function drawCharts(runs) {
    const box = clear(document.getElementById("compare-charts"));
    const note = document.getElementById("compare-note");
    const keysOf = runs.map((run) => new Set(run.points.map((p) => p.key).filter((k) => !skipped(k))));
    const every = new Set([].concat(...keysOf.map((keys) => [...keys])));
    const byName = (a, b) => (a === "loss" ? -1 : b === "loss" ? 1 : a.localeCompare(b));
    const shared = [...every].filter((k) => keysOf.every((keys) => keys.has(k))).sort(byName);
    const some = [...every].filter((k) => !shared.includes(k)).sort(byName);
    const drawn = shared.slice(0, MAX_CHARTS);
    const notes = [];
    if (shared.length > MAX_CHARTS) {
      notes.push("Not drawn, past the first " + MAX_CHARTS + " charts: " + shared.slice(MAX_CHARTS).join(", ") + ".");
    }
    if (some.length) notes.push("Not drawn, reported by only some of these jobs: " + some.join(", ") + ".");
    note.hidden = !notes.length;
    note.textContent = notes.join(" ");
    for (const key of drawn) {
      const id = "cmp-" + key.replace(/[^A-Za-z0-9_-]/g, "_");
      box.appendChild(el("div", { class: "chart-box" }, el("h3", {}, key), el("div", { class: "chart", id: id }),
        el("p", { class: "empty", id: id + "-empty", hidden: true })));
      let xTitle = "step";
      const traces = runs.map((run, i) => {
        const { byEpoch, xy } = curve(run.points, key);
        if (byEpoch) xTitle = "epoch";
        const color = colorOf(i);
        return Object.assign({ type: "scatter", mode: "lines+markers", name: Charts.text(label(run.job)),
          line: { color }, marker: { color } }, xy);
      });
      Charts.draw(id, traces, Charts.layout(xTitle, Charts.text(key)), "None of these jobs reported " + key + ".");
    }
    if (!drawn.length) {
      box.appendChild(el("p", { class: "empty" }, every.size
        ? "These jobs share no metric to overlay: each reports its own (listed above)."
        : "These jobs reported no metrics to overlay yet."));
    }
  }

  function colorOf(i) {
    return Charts.COLORS[i % Charts.COLORS.length];
  }

  /* Rows in a fixed order whichever job has them: the status, the request's fields, the result's numbers, the final
   * metrics (each group sorted by name). */
  function drawTable(runs) {
    const table = document.getElementById("compare-table");
    const head = clear(table.querySelector("thead"));
    head.appendChild(el("tr", {}, el("th", {}, ""), runs.map((r, i) => {
      const swatch = el("span", { class: "swatch", "data-color": colorOf(i), title: "this job's colour in the charts" });
      swatch.style.background = colorOf(i);
      return el("th", {}, swatch, el("a", { href: ST.jobUrl(r.job.id) }, label(r.job)));
    })));
    const rows = new Map();
    const add = (name, i, value) => {
      if (!rows.has(name)) rows.set(name, runs.map(() => ""));
      rows.get(name)[i] = value;
    };
    runs.forEach((run, i) => {
      add("status", i, run.job.status);
      for (const [k, v] of Object.entries(flatten(run.job.request, "", {}))) add("request." + k, i, v);
      for (const [k, v] of Object.entries(flatten(run.job.result || {}, "", {}))) if (typeof v === "number") add("result." + k, i, v);
      const last = new Map();
      for (const p of run.points) if (p.key.startsWith("validation_") || p.key === "loss") last.set(p.key, p.value);
      for (const [k, v] of last) add("final " + k, i, v);
    });
    const group = (name) => (name === "status" ? 0 : name.startsWith("request.") ? 1 : name.startsWith("result.") ? 2 : 3);
    const names = [...rows.keys()].sort((a, b) => group(a) - group(b) || a.localeCompare(b));
    const body = clear(table.querySelector("tbody"));
    for (const name of names) {
      const values = rows.get(name);
      const differ = new Set(values.map((v) => JSON.stringify(v))).size > 1;
      body.appendChild(el("tr", { class: differ ? "differ" : null }, el("th", {}, name),
        values.map((v) => el("td", {}, typeof v === "number" ? String(Number(v.toPrecision(6))) : v === "" ? "—" : String(v)))));
    }
  }

  async function load(ids) {
    const empty = document.getElementById("compare-empty");
    document.getElementById("ids").value = ids.join(", ");
    if (ids.length < 2 || ids.length > 5) {
      document.getElementById("compare-body").hidden = true;
      empty.hidden = false;
      empty.textContent = ids.length > 5
        ? "Pick at most 5 jobs."
        : "Pick 2 to 5 jobs: tick them on the jobs page and press \u201cCompare selected\u201d, or paste their ids above.";
      return;
    }
    const runs = [];
    const missing = [];
    for (const id of ids) {
      try {
        const job = await api("/jobs/" + encodeURIComponent(id));
        const metrics = await api("/jobs/" + encodeURIComponent(id) + "/metrics?limit=100000");
        runs.push({ job, points: metrics.metrics });
      } catch (e) {
        if (e.status === 401) return;
        missing.push(id + " (" + (e.status === 404 ? "no such job" : e.message) + ")");
      }
    }
    ST.notice(missing.length ? "Left out: " + missing.join(", ") : null);
    empty.hidden = runs.length >= 2;
    empty.textContent = runs.length >= 2 ? "" : "Fewer than 2 of these jobs could be read: pick others.";
    document.getElementById("compare-body").hidden = runs.length < 2;
    if (runs.length >= 2) {
      drawCharts(runs);
      drawTable(runs);
    }
  }

  document.getElementById("pick").addEventListener("submit", (event) => {
    event.preventDefault();
    const ids = document.getElementById("ids").value.split(/[\s,]+/).filter(Boolean);
    history.replaceState(null, "", "?ids=" + encodeURIComponent(ids.join(",")));
    load(ids);
  });
  ST.start(() => load(idsFromUrl()));
})();
