/* Charts of metric points ({key, step, epoch, value, worker}) with plotly.js, served by the service. */
"use strict";

const Charts = (() => {
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["sendDataToCloud"] };
  const MAX_POINTS = 4000;

  /* Plotly reads a few HTML-like tags in its labels; entities show the text as it is. */
  function text(value) {
    return String(value).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  /* plotly.js's default colours, given out by the caller (a job keeps its colour in every chart of the compare page,
   * whichever traces a chart leaves out). */
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf"];

  /* The legend is shown even for one line: it is where the metric's name is. */
  function layout(xTitle, yTitle, extra) {
    return Object.assign({
      margin: { l: 56, r: 12, t: 8, b: 40 },
      height: 260,
      showlegend: true,
      legend: { orientation: "h", y: -0.3 },
      xaxis: { title: { text: xTitle }, automargin: true },
      yaxis: { title: { text: yTitle }, automargin: true },
      hovermode: "closest",
    }, extra || {});
  }

  /* An epoch axis: whole epochs only, from the first one drawn, at most about ten ticks (1, 2, 5, 10, 20, ... apart). */
  function epochAxis(axis, traces) {
    let first = Infinity;
    let last = -Infinity;
    for (const t of traces) {
      for (const x of t.x) {
        first = Math.min(first, x);
        last = Math.max(last, x);
      }
    }
    if (!Number.isFinite(first)) return axis;
    let dtick = 1;
    for (let scale = 1; (last - first) / dtick > 10; scale *= 10) {
      dtick = [1, 2, 5].map((m) => m * scale).find((d) => (last - first) / d <= 10) || 10 * scale;
    }
    const pad = last > first ? (last - first) * 0.03 : 0.5;
    return Object.assign({}, axis, { tick0: first, dtick: dtick, range: [first - pad, last + pad], tickformat: "d" });
  }

  function thin(trace) {
    const n = trace.x.length;
    if (n <= MAX_POINTS) return trace;
    const every = Math.ceil(n / MAX_POINTS);
    const keep = (_, i) => i % every === 0 || i === n - 1;
    return Object.assign({}, trace, { x: trace.x.filter(keep), y: trace.y.filter(keep) });
  }

  /* Draw traces in #id, or hide the chart and say why in #id-empty. */
  function draw(id, traces, chartLayout, emptyText) {
    const node = document.getElementById(id);
    const empty = document.getElementById(id + "-empty");
    const shown = traces.filter((t) => t.x && t.x.length);
    if (!shown.length) {
      node.hidden = true;
      if (empty) {
        empty.hidden = false;
        empty.textContent = emptyText;
      }
      if (node.data) Plotly.purge(node);
      return;
    }
    node.hidden = false;
    if (empty) empty.hidden = true;
    let drawn = chartLayout;
    if (chartLayout.xaxis && chartLayout.xaxis.title && chartLayout.xaxis.title.text === "epoch") {
      drawn = Object.assign({}, chartLayout, { xaxis: epochAxis(chartLayout.xaxis, shown) });
    }
    Plotly.react(node, shown.map(thin), drawn, CONFIG);
  }

  function groupMean(points, keyOf) {
    const sums = new Map();
    for (const p of points) {
      const k = keyOf(p);
      if (k === null || k === undefined || p.value === null) continue;
      const acc = sums.get(k) || [0, 0];
      acc[0] += p.value;
      acc[1] += 1;
      sums.set(k, acc);
    }
    const xs = [...sums.keys()].sort((a, b) => a - b);
    return { x: xs, y: xs.map((x) => sums.get(x)[0] / sums.get(x)[1]) };
  }

  /* The sum over the workers at each step where one of them reported: the workers report at steps of their own,
   * so each one counts with its latest value (carried forward), from the first step by which every worker reported.
   * Summing only the points that share a step counted one worker at one step and all of them at the next. */
  function sumOverWorkers(points) {
    const ordered = points.filter((p) => p.value !== null && p.step !== null && p.step !== undefined)
      .sort((a, b) => a.step - b.step);
    const workers = new Set(ordered.map((p) => p.worker ?? "all"));
    const latest = new Map();
    const x = [];
    const y = [];
    ordered.forEach((p, i) => {
      latest.set(p.worker ?? "all", p.value);
      const stepDone = i === ordered.length - 1 || ordered[i + 1].step !== p.step;
      if (!stepDone || latest.size < workers.size) return;
      x.push(p.step);
      y.push([...latest.values()].reduce((a, b) => a + b, 0));
    });
    return { x, y };
  }

  /* One trace per worker of key over steps. */
  function perWorker(points, name, extra) {
    const workers = new Map();
    for (const p of points || []) {
      const w = p.worker === null || p.worker === undefined ? "all" : p.worker;
      if (!workers.has(w)) workers.set(w, { x: [], y: [] });
      workers.get(w).x.push(p.step);
      workers.get(w).y.push(p.value);
    }
    return [...workers.entries()].sort((a, b) => String(a[0]).localeCompare(String(b[0]), undefined, { numeric: true }))
      .map(([w, xy]) => Object.assign({ type: "scatter", mode: "lines", name: text(name + " · worker " + w), x: xy.x, y: xy.y }, extra || {}));
  }

  return { COLORS, text, layout, draw, groupMean, sumOverWorkers, perWorker };
})();
