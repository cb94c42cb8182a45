/* Charts of metric points ({key, step, epoch, value, worker}) with plotly.js, served by the service. */
"use strict";

const Charts = (() => {
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["sendDataToCloud"] };
  const MAX_POINTS = 4000;

  /* Plotly reads a few HTML-like tags in its labels; entities show the text as it is. */
  function text(value) {
    return String(value).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function layout(xTitle, yTitle, extra) {
    return Object.assign({
      margin: { l: 56, r: 12, t: 8, b: 40 },
      height: 260,
      legend: { orientation: "h", y: -0.3 },
      xaxis: { title: { text: xTitle }, automargin: true, dtick: xTitle === "epoch" ? 1 : undefined },
      yaxis: { title: { text: yTitle }, automargin: true },
      hovermode: "closest",
    }, extra || {});
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
    Plotly.react(node, shown.map(thin), chartLayout, CONFIG);
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

  function groupSum(points, keyOf) {
    const sums = new Map();
    for (const p of points) {
      if (p.value === null) continue;
      sums.set(keyOf(p), (sums.get(keyOf(p)) || 0) + p.value);
    }
    const xs = [...sums.keys()].sort((a, b) => a - b);
    return { x: xs, y: xs.map((x) => sums.get(x)) };
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

  return { text, layout, draw, groupMean, groupSum, perWorker };
})();
