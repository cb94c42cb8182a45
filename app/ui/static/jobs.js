/* Jobs page: newest first, filtered by state, type and model, refreshed every 2 s; which driver runs each job, or
 * what a queued one waits for. */
"use strict";

(() => {
  const { api, el, clear, badge, progress, time, duration, jobUrl } = ST;
  const REFRESH_MS = 2000;
  const picked = new Set();
  let timer = null;

  function modelOf(job) {
    if (job.model) return job.model.name;
    const requested = job.request && job.request.model;
    return (requested && requested.name) || job.name || "";
  }

  function row(job) {
    const box = el("input", { type: "checkbox", "aria-label": "compare", "data-id": job.id });
    box.checked = picked.has(job.id);
    box.addEventListener("change", () => {
      if (box.checked) picked.add(job.id);
      else picked.delete(job.id);
      updateCompare();
    });
    const kind = job.type + (job.framework ? " · " + job.framework : "");
    const name = el("a", { href: jobUrl(job.id), class: "job-link" }, job.name || job.type + " " + job.id.slice(0, 8));
    return el("tr", { "data-id": job.id, "data-status": job.status },
      el("td", {}, box),
      el("td", {}, name, el("div", { class: "muted" }, job.id.slice(0, 12), modelOf(job) && modelOf(job) !== job.name ? " · " + modelOf(job) : "")),
      el("td", {}, kind),
      el("td", {}, badge(job.status)),
      el("td", {}, progress(job.progress, job.progress_message)),
      el("td", {}, duration(job.started_at, job.finished_at)),
      el("td", {}, job.attempt + " / " + job.max_attempts),
      driverCell(job),
      el("td", {}, time(job.created_at)));
  }

  /* The driver (host:pid:boot) that runs the job or ran it last; for a queued job, what it waits for. */
  function driverCell(job) {
    const waiting = ST.waitingText(job);
    if (waiting) return el("td", { class: "driver waiting" }, waiting);
    if (!job.worker_id) return el("td", { class: "driver muted" }, job.status === "QUEUED" ? "queued" : "—");
    return el("td", { class: "driver" + (ST.ACTIVE.has(job.status) ? "" : " muted"), title: "driver " + job.worker_id },
      job.worker_id);
  }

  function updateCompare() {
    const button = document.getElementById("compare-selected");
    button.disabled = picked.size < 2 || picked.size > 5;
    button.textContent = "Compare selected (" + picked.size + ")";
  }

  async function refresh() {
    const status = document.getElementById("f-status").value;
    const type = document.getElementById("f-type").value;
    const model = document.getElementById("f-model").value.trim().toLowerCase();
    const query = new URLSearchParams({ limit: "100" });
    if (status) query.set("status", status);
    if (type) query.set("type", type);
    let page;
    try {
      page = await api("/jobs?" + query.toString());
    } catch (e) {
      if (e.status !== 401) ST.notice("Could not read the jobs: " + e.message);
      return;
    }
    ST.notice(null);
    const jobs = page.items.filter((j) => !model || modelOf(j).toLowerCase().includes(model));
    const body = clear(document.querySelector("#jobs tbody"));
    jobs.forEach((job) => body.appendChild(row(job)));
    const empty = document.getElementById("jobs-empty");
    empty.hidden = jobs.length > 0;
    document.getElementById("jobs").hidden = jobs.length === 0;
    if (!jobs.length) {
      empty.textContent = status || type || model
        ? "No jobs match these filters: clear them to see every job."
        : "No jobs yet: POST /train (Swagger UI at /docs has an example), or run `sparktrain submit " +
          "examples/random-forest-cv.json --wait` with the CLI. Jobs appear here as soon as they are queued.";
    }
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString(undefined, { hour12: false });
  }

  function schedule() {
    clearTimeout(timer);
    refresh().finally(() => {
      timer = setTimeout(schedule, REFRESH_MS);
    });
  }

  for (const id of ["f-status", "f-type", "f-model"]) {
    document.getElementById(id).addEventListener("input", schedule);
  }
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
  document.getElementById("compare-selected").addEventListener("click", () => {
    location.href = ST.root + "/ui/compare?ids=" + encodeURIComponent([...picked].join(","));
  });
  updateCompare();
  ST.start(schedule);
})();
