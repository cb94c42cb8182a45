/* Job page: state, attempts, error, result and request; live charts, the gradient-sharing panel and the log, all
 * fed by GET /jobs/{id}/events. */
"use strict";

(() => {
  const { api, el, clear, badge, time, duration, facts } = ST;
  const jobId = document.body.dataset.jobId;
  const PHASES = [
    ["phase_data_ms", "data"],
    ["phase_compute_ms", "forward/backward"],
    ["phase_encode_ms", "encode"],
    ["phase_exchange_ms", "exchange"],
    ["phase_apply_ms", "apply"],
  ];
  const SHARING = new Set(["tau", "sparsity", "wire_bytes", "bytes", "codec_bytes", "dense_bytes", "residual_norm",
    "collective", "clipped_mass", ...PHASES.map((p) => p[0])]);
  const MAX_LOG_LINES = 2000;
  let job = null;
  let byKey = new Map(); // metric key -> its points in arrival order, grown in place as events come
  let drawTimer = null;
  let stream = null;

  function showJob(j) {
    job = j;
    document.title = (j.name || "job " + j.id.slice(0, 8)) + " · sparktrain";
    document.getElementById("job-name").textContent = j.name || j.type + " job " + j.id.slice(0, 8);
    document.getElementById("request").textContent = JSON.stringify(j.request, null, 2);
    document.getElementById("compare-link").href = ST.root + "/ui/compare?ids=" + encodeURIComponent(j.id);
    document.getElementById("sharing").hidden = j.framework !== "torch" || j.type === "tune";
    const model = j.model
      ? el("a", { href: ST.root + "/ui/models#" + encodeURIComponent(j.model.name) }, j.model.name + " v" + j.model.version)
      : null;
    facts(document.getElementById("facts"), [
      ["Id", j.id],
      ["Type", j.type + (j.framework ? " · " + j.framework : "")],
      ["Owner", j.owner],
      ["Created", time(j.created_at)],
      ["Started", time(j.started_at)],
      ["Finished", time(j.finished_at)],
      ["Duration", duration(j.started_at, j.finished_at)],
      ["Attempt", j.attempt + " of " + j.max_attempts],
      ["Driver", j.worker_id],
      ["Spark application", j.spark_app_id],
      ["Model", model],
      ["Warnings", j.warnings && j.warnings.length ? j.warnings.join("\n") : null],
    ]);
    const body = clear(document.querySelector("#attempts tbody"));
    for (const attempt of j.attempts || []) {
      const current = attempt.attempt === j.attempt;
      const a = Object.assign({}, attempt, {
        worker_id: attempt.worker_id || (current ? j.worker_id : null),
        started_at: attempt.started_at || (current ? j.started_at : null),
      });
      const why = a.error_reason ? a.error_reason + (a.error_message ? ": " + a.error_message : "") : a.ended_at ? a.status : "";
      body.appendChild(el("tr", {}, el("td", {}, a.attempt), el("td", {}, a.queue || "—"), el("td", { class: "driver" }, a.worker_id || "—"),
        el("td", {}, time(a.started_at)), el("td", {}, time(a.ended_at)), el("td", {}, why || (a.attempt === j.attempt ? "current" : "—"))));
    }
    showState(j);
  }

  function showState(s) {
    const status = document.getElementById("job-status");
    status.className = "badge " + s.status;
    status.textContent = s.status;
    document.getElementById("job-progress").style.width = Math.round(100 * (s.progress || 0)) + "%";
    document.getElementById("job-message").textContent =
      Math.round(100 * (s.progress || 0)) + "%" + (s.progress_message ? " · " + s.progress_message : "");
    const waiting = ST.waitingText(Object.assign({}, job, s));
    const line = document.getElementById("job-waiting");
    line.hidden = !waiting;
    line.textContent = waiting || "";
    document.getElementById("cancel").hidden = !["QUEUED", "STARTING", "RUNNING"].includes(s.status);
    const box = document.getElementById("error-box");
    box.hidden = !s.error;
    if (s.error) {
      document.getElementById("error-reason").textContent = s.error.reason;
      document.getElementById("error-message").textContent = s.error.message;
    }
    document.getElementById("result").textContent = s.result ? JSON.stringify(s.result, null, 2) : "No result yet.";
    if (job) TuneView.show(Object.assign({}, job, { result: s.result }));
  }

  function appendLog(lines) {
    const log = document.getElementById("log");
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 30;
    const batch = document.createDocumentFragment();
    for (const line of lines.slice(-MAX_LOG_LINES)) {
      batch.appendChild(el("span", { class: line.level }, time(line.time) + " " + line.level + " " + line.message + "\n"));
    }
    log.appendChild(batch);
    for (let extra = log.childNodes.length - MAX_LOG_LINES; extra > 0; extra--) log.removeChild(log.firstChild);
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  function scheduleDraw() {
    if (drawTimer) return;
    drawTimer = setTimeout(() => {
      drawTimer = null;
      drawAll();
    }, 500);
  }

  /* Each point is appended once to its key's list: following a job costs time linear in its points. */
  function addPoints(list) {
    for (const p of list) {
      let same = byKey.get(p.key);
      if (!same) byKey.set(p.key, (same = []));
      same.push(p);
    }
  }

  function drawAll() {
    const get = (k) => byKey.get(k) || [];
    const withEpoch = (list) => list.filter((p) => p.epoch !== null && p.epoch !== undefined);
    const train = Charts.groupMean(withEpoch(get("loss")), (p) => p.epoch);
    const valid = Charts.groupMean(withEpoch(get("validation_loss")), (p) => p.epoch);
    Charts.draw("chart-loss", [
      Object.assign({ type: "scatter", mode: "lines+markers", name: "training loss (mean of the epoch's steps)" }, train),
      Object.assign({ type: "scatter", mode: "lines+markers", name: "validation loss" }, valid),
    ], Charts.layout("epoch", "loss"), "No loss per epoch yet: torch jobs report it as their epochs end; xgboost and Spark ML jobs show their metrics under \u201cOther metrics\u201d.");

    const validation = [...byKey.keys()].filter((k) => k.startsWith("validation_") && k !== "validation_loss").sort();
    Charts.draw("chart-validation", validation.map((k) => {
      const list = get(k);
      const hasEpoch = list.some((p) => p.epoch !== null && p.epoch !== undefined);
      return Object.assign({ type: "scatter", mode: "lines+markers", name: Charts.text(k.slice(11) + (hasEpoch ? "" : " (by step)")) },
        Charts.groupMean(list, (p) => (hasEpoch ? p.epoch : p.step)));
    }), Charts.layout("epoch", "value"), "No validation metrics yet: they come with a validation dataset, at the end of each epoch (torch) or of training.");

    const speed = Charts.groupSum(get("samples_per_s"), (p) => p.step);
    Charts.draw("chart-speed", [Object.assign({ type: "scatter", mode: "lines", name: "samples/s (all workers)" }, speed)],
      Charts.layout("step", "samples/s"), "No throughput yet: torch jobs report samples per second at every step.");

    const other = [...byKey.keys()].filter((k) => k !== "loss" && k !== "samples_per_s" && !k.startsWith("validation_") &&
      !SHARING.has(k) && !k.startsWith("residual_")).sort();
    Charts.draw("chart-other", other.map((k) => Object.assign({ type: "scatter", mode: "lines+markers", name: Charts.text(k) },
      Charts.groupMean(get(k), (p) => p.step))), Charts.layout("step", "value"), "No other metrics: this job reports only the ones above.");
    if (job && job.framework === "torch") drawSharing(get);
  }

  function drawSharing(get) {
    const waiting = job && ST.ACTIVE.has(job.status) ? " yet" : "";
    Charts.draw("chart-tau", Charts.perWorker(get("tau"), "τ"), Charts.layout("step", "τ", { yaxis: { type: "log", title: { text: "τ" } } }),
      "No τ" + waiting + ": it is recorded per worker and step in gradient_sharing mode.");
    Charts.draw("chart-sparsity", Charts.perWorker(get("sparsity"), "sent"), Charts.layout("step", "fraction of parameters sent"),
      "No sparsity" + waiting + ": it is recorded per worker and step in gradient_sharing mode.");
    const wire = get("wire_bytes").length ? get("wire_bytes") : get("bytes");
    Charts.draw("chart-bytes", [...Charts.perWorker(wire, "sent"), ...Charts.perWorker(get("dense_bytes"), "dense", { line: { dash: "dot" } })],
      Charts.layout("step", "bytes per step"), "No bytes" + waiting + ": the trainer records bytes sent and a dense exchange's bytes per step.");
    drawPhases(get);
  }

  /* Each worker's latest steps laid end to end: one bar segment per phase (DL4J's Spark training timeline). */
  function drawPhases(get) {
    const present = PHASES.filter(([k]) => get(k).length);
    if (!present.length) {
      Charts.draw("chart-phases", [], null, "No phase timings: this trainer does not record phase_data_ms, phase_compute_ms, " +
        "phase_encode_ms, phase_exchange_ms and phase_apply_ms per step (a newer trainer does).");
      return;
    }
    const byWorkerStep = new Map();
    for (const [key] of present) {
      for (const p of get(key)) {
        const id = (p.worker ?? 0) + ":" + p.step;
        if (!byWorkerStep.has(id)) byWorkerStep.set(id, { worker: p.worker ?? 0, step: p.step });
        byWorkerStep.get(id)[key] = p.value;
      }
    }
    const workers = new Map();
    for (const entry of byWorkerStep.values()) {
      if (!workers.has(entry.worker)) workers.set(entry.worker, []);
      workers.get(entry.worker).push(entry);
    }
    const traces = present.map(([key, label]) => ({ type: "bar", orientation: "h", name: label, x: [], y: [], base: [], customdata: [],
      hovertemplate: label + " %{x:.1f} ms, step %{customdata}<extra>worker %{y}</extra>" }));
    for (const [worker, steps] of workers) {
      steps.sort((a, b) => a.step - b.step);
      let offset = 0;
      for (const s of steps.slice(-8)) {
        present.forEach(([key], i) => {
          const ms = s[key] || 0;
          traces[i].x.push(ms);
          traces[i].base.push(offset);
          traces[i].y.push("worker " + worker);
          traces[i].customdata.push(s.step);
          offset += ms;
        });
      }
    }
    Charts.draw("chart-phases", traces, Charts.layout("milliseconds (latest steps, end to end)", "", { barmode: "overlay", showlegend: true }),
      "No phase timings yet.");
  }

  async function refreshJob() {
    try {
      showJob(await api("/jobs/" + encodeURIComponent(jobId)));
    } catch (e) {
      if (e.status === 404) {
        ST.clear(document.getElementById("content")).appendChild(el("p", { class: "empty" },
          "No job " + jobId + " here: it does not exist, or it belongs to another owner. The jobs page lists the ones you can see."));
      } else if (e.status !== 401) ST.notice("Could not read the job: " + e.message);
      throw e;
    }
  }

  function onEvent(type, data) {
    if (type === "state") {
      const changed = !job || job.status !== data.status || job.attempt !== data.attempt;
      if (job) Object.assign(job, data);
      showState(data);
      if (changed) refreshJob().catch(() => {});
    } else if (type === "metrics") {
      addPoints(data.points);
      scheduleDraw();
    } else if (type === "log") {
      appendLog(data.lines);
    } else if (type === "end") {
      document.getElementById("log-state").textContent = "(the job ended: " + data.status + ")";
      drawAll();
    }
  }

  async function start() {
    if (stream) stream.abort();
    byKey = new Map();
    ST.clear(document.getElementById("log"));
    try {
      await refreshJob();
    } catch (e) {
      return;
    }
    document.getElementById("log-state").textContent = "(following)";
    drawAll();
    stream = new AbortController();
    ST.follow("/jobs/" + encodeURIComponent(jobId) + "/events", onEvent, stream.signal).catch((e) => ST.notice("Event stream: " + e.message));
  }

  document.getElementById("cancel").addEventListener("click", async () => {
    try {
      await api("/jobs/" + encodeURIComponent(jobId) + "/cancel", { method: "POST" });
    } catch (e) {
      ST.notice("Cancel: " + e.message);
    }
  });
  window.addEventListener("pagehide", () => stream && stream.abort());
  ST.start(start);
})();
