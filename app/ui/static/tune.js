/* Job page of a tune job: the leaderboard of its trials (each linked to its training job) and a parallel-coordinates
 * view of the sampled parameters against the metric; on a trial's page, a link to its tune job. */
"use strict";

const TuneView = (() => {
  const { el, clear } = ST;

  /* A value as the leaderboard shows it: a number to 4 digits; a list or an object (a choice among layer stacks) as
   * its JSON, cut at `longest` characters (the whole of it in the cell's title); text as it is. */
  function fmt(value, longest = 80) {
    if (value === null || value === undefined) return "—";
    if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toPrecision(4);
    if (typeof value !== "object") return String(value);
    const json = JSON.stringify(value);
    return json.length > longest ? json.slice(0, longest - 1) + "…" : json;
  }

  /* A parallel axis of values that are not all numbers: one tick per distinct value, told apart by its whole JSON;
   * lists and objects labelled by fmt(), and two whose labels the cut makes equal numbered (#1, #2). */
  function categories(raw) {
    const key = (v) => JSON.stringify(v === undefined ? null : v);
    const keys = [...new Set(raw.map(key))];
    const labels = keys.map((k) => {
      const v = JSON.parse(k);
      return v !== null && typeof v === "object" ? fmt(v, 32) : String(v);
    });
    const count = {};
    const ticks = labels.map((l) => {
      if (labels.indexOf(l) === labels.lastIndexOf(l)) return l;
      count[l] = (count[l] || 0) + 1;
      return l + " #" + count[l];
    });
    return { values: raw.map((v) => keys.indexOf(key(v))), tickvals: keys.map((_, i) => i), ticktext: ticks.map(text) };
  }

  /* Plotly reads a few HTML-like tags in its labels; entities show the text as it is. */
  function text(value) {
    return String(value).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function jobLink(id, text) {
    return id ? el("a", { href: ST.root + "/ui/jobs/" + encodeURIComponent(id) }, text || id.slice(0, 8)) : "—";
  }

  function drawParallel(node, board, result) {
    const done = board.filter((r) => r.state === "COMPLETE" && typeof r.metric === "number");
    if (done.length < 2 || typeof Plotly === "undefined") {
      node.hidden = true;
      return;
    }
    node.hidden = false;
    const dims = Object.keys(done[0].params).map((p) => {
      const raw = done.map((r) => r.params[p]);
      if (raw.every((v) => typeof v === "number")) return { label: text(p), values: raw };
      return { label: text(p), ...categories(raw) };
    });
    dims.push({ label: text(result.metric), values: done.map((r) => r.metric) });
    const line = { color: done.map((r) => r.metric), colorscale: "Viridis", reversescale: result.mode === "min", showscale: true };
    Plotly.react(node, [{ type: "parcoords", line, dimensions: dims }],
      { margin: { l: 80, r: 80, t: 40, b: 20 }, height: 320 }, { displaylogo: false, responsive: true });
  }

  function show(job) {
    const box = document.getElementById("tune");
    const parent = document.getElementById("tune-parent");
    if (parent) {
      parent.hidden = !job.parent_id;
      if (job.parent_id) clear(parent).append("Trial " + job.trial + " of tune job ", jobLink(job.parent_id));
    }
    if (!box) return;
    box.hidden = job.type !== "tune";
    const result = job.result;
    const body = clear(document.querySelector("#leaderboard tbody"));
    if (job.type !== "tune" || !result || !result.leaderboard) return;
    const unit = (row) => (row.rounds !== undefined ? row.rounds : row.epochs);
    for (const row of result.leaderboard) {
      const params = Object.entries(row.params).map(([k, v]) => k + " = " + fmt(v)).join(", ");
      const whole = Object.entries(row.params).map(([k, v]) => k + " = " + JSON.stringify(v)).join(", ");
      const model = row.model ? row.model.name + " v" + row.model.version : "—";
      const best = result.best && result.best.trial === row.trial ? " ★" : "";
      body.appendChild(el("tr", {}, el("td", {}, row.trial + best), el("td", {}, row.state), el("td", {}, fmt(row.metric)),
        el("td", {}, fmt(unit(row))), el("td", {}, fmt(row.duration_s)), el("td", { title: whole }, params),
        el("td", {}, model), el("td", {}, jobLink(row.job_id))));
    }
    document.getElementById("tune-metric").textContent = result.metric + " (" + result.mode + ")";
    drawParallel(document.getElementById("tune-parallel"), result.leaderboard, result);
  }

  return { show };
})();
