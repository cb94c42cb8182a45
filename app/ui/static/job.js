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
  /* Counters and totals of a whole run (a worker's last event, or a running count): one number per worker, shown in
   * a table; as charts they were single points on scales from 1 to 300,000. */
  const TOTALS = new Set(["wire_bytes_sent", "wire_bytes_total", "wire_bytes_per_step", "wire_compression",
    "codec_compression", "dense_steps", "clipped_mass_total", "step_events_dropped"]);
  const isTotal = (k) => TOTALS.has(k) || k.endsWith("_total");
  const MAX_LOG_LINES = 2000;
  const WHY_CHARS = 100;
  let job = null;
  let byKey = new Map(); // metric key -> its points in arrival order, grown in place as events come
  let lastStep = new Map(); // "key|worker" -> the step of its newest point
  let drawTimer = null;
  let stream = null;

  const active = () => Boolean(job && ST.ACTIVE.has(job.status));
  const yet = () => (active() ? " yet" : "");

  /* An error as one line for the attempts table: its first line, cut short; the whole text in the title. */
  function oneLine(text) {
    const whole = String(text).trim();
    const first = whole.split("\n")[0];
    if (first.length > WHY_CHARS) return first.slice(0, WHY_CHARS - 1) + "…";
    return first === whole ? first : first + " …";
  }

  function showJob(j) {
    job = j;
    document.title = (j.name || "job " + j.id.slice(0, 8)) + " · sparktrain";
    document.getElementById("job-name").textContent = j.name || j.type + " job " + j.id.slice(0, 8);
    document.getElementById("request").textContent = JSON.stringify(j.request, null, 2);
    document.getElementById("compare-link").href = ST.root + "/ui/compare?ids=" + encodeURIComponent(j.id);
    document.getElementById("sharing").hidden = j.framework !== "torch" || j.type === "tune";
    document.getElementById("curves").hidden = j.type === "tune";  // a tune job's figures are its leaderboard
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
      ["Duration", el("span", { id: "duration" }, duration(j.started_at, j.finished_at))],
      ["Attempt", j.attempt + " of " + j.max_attempts],
      ["Driver", j.worker_id ? ST.breakable(j.worker_id) : null],
      ["Spark application", j.spark_app_id],
      ["Model", model],
      ["Warnings", j.warnings && j.warnings.length ? j.warnings.join("\n") : null],
    ]);
    const body = clear(document.querySelector("#attempts tbody"));
    for (const attempt of j.attempts || []) {
      const current = attempt.attempt === j.attempt;
      const a = Object.assign({}, attempt, {
        worker_id: attempt.worker_id || (current ? j.worker_id : null),
        // a job's started_at is its first attempt's; each attempt's own is in its entry (a queued retry has none yet)
        started_at: attempt.started_at || (current && (j.attempts || []).length === 1 ? j.started_at : null),
      });
      const full = a.error_reason ? a.error_reason + (a.error_message ? ": " + a.error_message : "") : a.ended_at ? a.status : "";
      const why = full ? el("span", { class: "why", title: full }, oneLine(full)) : a.attempt === j.attempt ? "current" : "—";
      body.appendChild(el("tr", {}, el("td", {}, a.attempt), el("td", {}, a.queue || "—"),
        el("td", { class: "driver" }, a.worker_id ? ST.breakable(a.worker_id) : "—"),
        el("td", {}, time(a.started_at)), el("td", {}, time(a.ended_at)), el("td", {}, why)));
    }
    showState(j);
  }

  function showState(s) {
    const status = document.getElementById("job-status");
    status.className = "badge " + s.status;
    status.textContent = s.status;
    document.getElementById("job-progress").style.width = Math.round(100 * (s.progress || 0)) + "%";
    document.getElementById("job-message").textContent = ST.progressText(s);
    const waiting = ST.waitingText(Object.assign({}, job, s));
    const line = document.getElementById("job-waiting");
    line.hidden = !waiting;
    line.textContent = waiting || "";
    document.getElementById("cancel").hidden = !["QUEUED", "STARTING", "RUNNING"].includes(s.status);
    showError(s.error);
    document.getElementById("result").textContent = s.result ? JSON.stringify(s.result, null, 2) : noResult(s.status);
    showDuration();
    if (job) TuneView.show(Object.assign({}, job, { result: s.result }));
  }

  function noResult(status) {
    if (ST.ACTIVE.has(status)) return "No result yet.";
    if (status === "SUCCEEDED") return "No result: this job ended without one.";
    return "No result: the job " + (status === "CANCELLED" ? "was cancelled" : "failed") + " before it had one.";
  }

  /* The error once, with its newlines (a traceback stays readable, in a box of its own height). A cancel the user
   * asked for is no error: it shows as a neutral notice. */
  function showError(error) {
    const box = document.getElementById("error-box");
    box.hidden = !error;
    if (!error) return;
    const cancelled = error.reason === "CANCELLED";
    box.classList.toggle("cancelled", cancelled);
    document.getElementById("error-title").textContent = cancelled ? "Cancelled" : "Error";
    const reason = document.getElementById("error-reason");
    reason.hidden = cancelled;
    reason.textContent = error.reason;
    document.getElementById("error-message").textContent = error.message || (cancelled ? "The job was cancelled." : "");
  }

  /* The summary's duration, ticking while the job is active. */
  function showDuration() {
    const node = document.getElementById("duration");
    if (node && job) node.textContent = duration(job.started_at, job.finished_at);
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

  /* Each point is appended once to its key's list: following a job costs time linear in its points. A point at an
   * earlier step than its key's and worker's last (or the same: each is stored once) is a retried attempt writing its steps again from the checkpoint
   * it continues from (the service dropped the old ones past it): the old ones go here too. */
  function addPoints(list) {
    for (const p of list) {
      let same = byKey.get(p.key);
      if (!same) byKey.set(p.key, (same = []));
      const last = lastStep.get(p.key + "|" + p.worker);
      if (last !== undefined && p.step <= last) {
        same = same.filter((q) => q.worker !== p.worker || q.step < p.step);
        byKey.set(p.key, same);
      }
      lastStep.set(p.key + "|" + p.worker, p.step);
      same.push(p);
    }
  }

  function drawAll() {
    const get = (k) => byKey.get(k) || [];
    const hasEpochs = (list) => list.some((p) => p.epoch !== null && p.epoch !== undefined);
    const withEpoch = (list) => list.filter((p) => p.epoch !== null && p.epoch !== undefined);
    const train = Charts.groupMean(withEpoch(get("loss")), (p) => p.epoch);
    const valid = Charts.groupMean(withEpoch(get("validation_loss")), (p) => p.epoch);
    Charts.draw("chart-loss", [
      Object.assign({ type: "scatter", mode: "lines+markers", name: "training loss (mean of the epoch's steps)" }, train),
      Object.assign({ type: "scatter", mode: "lines+markers", name: "validation loss" }, valid),
    ], Charts.layout("epoch", "loss"), "No loss per epoch" + yet() + ": torch jobs report it as their epochs end; xgboost " +
      "and Spark ML jobs show their metrics under \u201cOther metrics by step\u201d.");

    // Validation metrics with epochs (torch); those by step (xgboost's rounds, Spark ML's end of training) are
    // drawn with the other metrics by step.
    const keys = [...byKey.keys()].sort();
    const validation = keys.filter((k) => k.startsWith("validation_") && k !== "validation_loss" && hasEpochs(get(k)));
    const byStepOnly = keys.some((k) => k.startsWith("validation_") && !hasEpochs(get(k)));
    Charts.draw("chart-validation", validation.map((k) => Object.assign(
      { type: "scatter", mode: "lines+markers", name: Charts.text(k.slice(11)) },
      Charts.groupMean(withEpoch(get(k)), (p) => p.epoch))),
    Charts.layout("epoch", validation.length === 1 ? Charts.text(validation[0].slice(11)) : "value"),
    byStepOnly
      ? "No validation metrics per epoch: this job reports them by step, under \u201cOther metrics by step\u201d."
      : "No validation metrics" + yet() + ": they come with a validation dataset, at the end of each epoch.");

    const speed = Charts.sumOverWorkers(get("samples_per_s"));
    Charts.draw("chart-speed", [Object.assign({ type: "scatter", mode: "lines", name: "samples/s (all workers)" }, speed)],
      Charts.layout("step", "samples/s"), "No throughput" + yet() + ": torch jobs report samples per second at every step.");

    const other = keys.filter((k) => k !== "loss" && k !== "samples_per_s" && !validation.includes(k) &&
      k !== "validation_loss" && !SHARING.has(k) && !isTotal(k) && !k.startsWith("residual_"));
    Charts.draw("chart-other", other.map((k) => {
      const xy = Charts.groupMean(get(k), (p) => p.step);
      return Object.assign({ type: "scatter", mode: xy.x.length > 60 ? "lines" : "lines+markers", name: Charts.text(k) }, xy);
    }),
    Charts.layout(job && job.framework === "xgboost" ? "round" : "step", other.length === 1 ? Charts.text(other[0]) : "value"),
    "No other metrics" + yet() + ": this job reports only the ones above.");
    drawTotals(keys.filter(isTotal), get);
    if (job && job.framework === "torch") drawSharing(get);
  }

  /* The run's counters and totals: the latest value of each worker. */
  function drawTotals(keys, get) {
    const box = document.getElementById("totals-box");
    box.hidden = !keys.length;
    if (!keys.length) return;
    const latest = new Map(); // key -> worker -> value
    const workers = new Set();
    for (const k of keys) {
      const values = new Map();
      for (const p of get(k)) {
        const w = p.worker === null || p.worker === undefined ? "all" : p.worker;
        workers.add(w);
        values.set(w, p.value);
      }
      latest.set(k, values);
    }
    const order = [...workers].sort((a, b) => String(a).localeCompare(String(b), undefined, { numeric: true }));
    const table = document.getElementById("totals");
    clear(table.querySelector("thead")).appendChild(el("tr", {}, el("th", {}, "Metric"),
      order.map((w) => el("th", {}, w === "all" ? "job" : "worker " + w))));
    const body = clear(table.querySelector("tbody"));
    for (const k of keys) {
      body.appendChild(el("tr", { "data-key": k }, el("th", {}, k), order.map((w) => {
        const v = latest.get(k).get(w);
        return el("td", {}, v === undefined || v === null ? "—" : Number(v.toPrecision(6)).toLocaleString("en-US"));
      })));
    }
  }

  function drawSharing(get) {
    const waiting = yet();
    // a log axis draws no τ of 0: the steps of a model exchanged exactly (dense, no threshold) record 0
    const tau = get("tau").filter((p) => p.value > 0);
    const exact = !tau.length && get("tau").length > 0;
    Charts.draw("chart-tau", Charts.perWorker(tau, "τ"), Charts.layout("step", "τ", { yaxis: { type: "log", title: { text: "τ" } } }),
      exact ? "No τ: this model is small enough to be exchanged exactly at every step (a dense all-reduce, under " +
              "training.gradient_sharing.exact_below_bytes), so no threshold applies."
            : "No τ" + waiting + ": it is recorded per worker and step in gradient_sharing mode.");
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
      Charts.draw("chart-phases", [], null, active()
        ? "No phase timings yet: each worker reports them with its steps."
        : "No phase timings: this trainer does not record phase_data_ms, phase_compute_ms, phase_encode_ms, " +
          "phase_exchange_ms and phase_apply_ms per step (a newer trainer does).");
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
    lastStep = new Map();
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
    const name = job ? job.name || job.type + " job " + job.id.slice(0, 8) : jobId;
    if (!window.confirm("Cancel " + name + "?")) return;
    try {
      await api("/jobs/" + encodeURIComponent(jobId) + "/cancel", { method: "POST" });
    } catch (e) {
      ST.notice("Cancel: " + e.message, { transient: true });
    }
  });
  setInterval(() => active() && showDuration(), 1000);
  window.addEventListener("pagehide", () => stream && stream.abort());
  ST.start(start);
})();
