/* Jobs page: newest first, filtered by state, type and job or model name (all by the API), refreshed every 2 s; which
 * driver runs each job, or what a queued one waits for. The filters live in the URL's query (?status=&type=&model=),
 * so a reload or a shared link keeps them. Rows are updated in place, cell by cell, so that a ticked box, the focus and a
 * selection survive the refresh. */
"use strict";

(() => {
  const { api, el, badge, time, duration, jobUrl } = ST;
  const REFRESH_MS = 2000;
  const STEP = 100; // rows added by "Show older"
  const FILTERS = { status: "f-status", type: "f-type", model: "f-model" };
  const picked = new Set();
  const rows = new Map(); // job id -> { tr, cells: Map(name -> [signature, td]) }
  let timer = null;
  let depth = 0; // how many of the newest jobs (of the chosen state and type) are read; 0 until the first refresh
  let generation = 0;

  function filters() {
    return {
      status: document.getElementById(FILTERS.status).value,
      type: document.getElementById(FILTERS.type).value,
      model: document.getElementById(FILTERS.model).value.trim(),
    };
  }

  function readUrl() {
    const query = new URLSearchParams(location.search);
    for (const [name, id] of Object.entries(FILTERS)) {
      const value = query.get(name) || "";
      const input = document.getElementById(id);
      if (input.tagName === "SELECT" && value && ![...input.options].some((o) => o.value === value)) continue;
      input.value = value;
    }
  }

  function writeUrl(f) {
    const query = new URLSearchParams();
    for (const name of Object.keys(FILTERS)) if (f[name]) query.set(name, f[name]);
    const search = query.toString() ? "?" + query.toString() : "";
    if (search !== location.search) history.replaceState(null, "", location.pathname + search);
  }

  function modelOf(job) {
    if (job.model) return job.model.name;
    const requested = job.request && job.request.model;
    return (requested && requested.name) || job.name || "";
  }

  function pickBox(job) {
    const box = el("input", { type: "checkbox", "aria-label": "compare", "data-id": job.id });
    box.checked = picked.has(job.id);
    box.addEventListener("change", () => {
      if (box.checked) picked.add(job.id);
      else picked.delete(job.id);
      updateCompare();
    });
    return el("td", {}, box);
  }

  function nameCell(job) {
    const name = el("a", { href: jobUrl(job.id), class: "job-link" }, job.name || job.type + " " + job.id.slice(0, 8));
    const model = modelOf(job) && modelOf(job) !== job.name ? " · " + modelOf(job) : "";
    const trial = job.parent_id
      ? el("span", { class: "trial" }, " · trial " + job.trial + " of ",
        el("a", { href: jobUrl(job.parent_id), class: "parent-link" }, "tune " + job.parent_id.slice(0, 8)))
      : null;
    return el("td", {}, name, el("div", { class: "muted" }, job.id.slice(0, 12), model, trial));
  }

  /* The driver (host:pid:boot) that runs the job or ran it last; for a queued job, what it waits for. */
  function driverCell(job) {
    const waiting = ST.waitingText(job);
    if (waiting) return el("td", { class: "driver waiting" }, waiting);
    if (!job.worker_id) return el("td", { class: "driver muted" }, job.status === "QUEUED" ? "queued" : "—");
    return el("td", { class: "driver" + (ST.ACTIVE.has(job.status) ? "" : " muted"), title: "driver " + job.worker_id },
      ST.breakable(job.worker_id));
  }

  /* Each cell of a row: [name, signature, build]. A cell is built again only when its signature changed. */
  function cellsOf(job) {
    const kind = job.type + (job.framework ? " · " + job.framework : "");
    const took = duration(job.started_at, job.finished_at);
    const attempt = job.attempt + " / " + job.max_attempts;
    return [
      ["name", JSON.stringify([job.name, modelOf(job), job.parent_id, job.trial]), () => nameCell(job)],
      ["type", kind, () => el("td", {}, kind)],
      ["state", job.status, () => el("td", {}, badge(job.status))],
      ["progress", JSON.stringify([job.progress, job.progress_message, job.status]), () => el("td", {}, ST.progress(job))],
      ["duration", took, () => el("td", {}, took)],
      ["attempt", attempt, () => el("td", {}, attempt)],
      ["driver", JSON.stringify([ST.waitingText(job), job.worker_id, ST.ACTIVE.has(job.status)]), () => driverCell(job)],
      ["created", job.created_at, () => el("td", {}, time(job.created_at))],
    ];
  }

  function rowOf(job) {
    let row = rows.get(job.id);
    if (!row) {
      row = { tr: el("tr", { "data-id": job.id }, pickBox(job)), cells: new Map() };
      rows.set(job.id, row);
    }
    row.tr.dataset.status = job.status;
    for (const [name, signature, build] of cellsOf(job)) {
      const had = row.cells.get(name);
      if (had && had[0] === signature) continue;
      const td = build();
      if (had) row.tr.replaceChild(td, had[1]);
      else row.tr.appendChild(td);
      row.cells.set(name, [signature, td]);
    }
    return row.tr;
  }

  /* The table shows exactly these rows, in this order: rows that stay are neither rebuilt nor moved unless the order
   * changed (moving a row would take the focus from its checkbox). */
  function showRows(jobs) {
    const body = document.querySelector("#jobs tbody");
    const keep = new Set(jobs.map((j) => j.id));
    for (const [id, row] of rows) {
      if (keep.has(id)) continue;
      row.tr.remove();
      rows.delete(id);
    }
    let next = body.firstElementChild;
    for (const job of jobs) {
      const tr = rowOf(job);
      if (tr === next) next = next.nextElementSibling;
      else body.insertBefore(tr, next);
    }
  }

  function updateCompare() {
    const button = document.getElementById("compare-selected");
    button.disabled = picked.size < 2 || picked.size > 5;
    button.textContent = "Compare selected (" + picked.size + ")";
  }

  /* The newest `want` jobs of the chosen state, type and name (`?name=`: the job's name or its model's, in any
   * case), read a page of up to 500 at a time. */
  async function read(f, want) {
    const items = [];
    let cursor = null;
    do {
      const query = new URLSearchParams({ limit: String(Math.min(500, want - items.length)) });
      if (f.status) query.set("status", f.status);
      if (f.type) query.set("type", f.type);
      if (f.model) query.set("name", f.model);
      if (cursor) query.set("cursor", cursor);
      const page = await api("/jobs?" + query.toString());
      items.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor && items.length < want);
    return { items, more: Boolean(cursor) };
  }

  function showWindow(f, got) {
    const note = document.getElementById("window-note");
    const older = document.getElementById("older");
    const what = (f.status ? f.status + " " : "") + (f.type ? f.type + " " : "") + "jobs" +
      (f.model ? " named \u201c" + f.model + "\u201d" : "");
    older.hidden = !got.more;
    older.textContent = "Show " + STEP + " older";
    if (got.more) note.textContent = "The newest " + got.items.length + " " + what + ".";
    else note.textContent = f.model ? what[0].toUpperCase() + what.slice(1) + ": " + got.items.length + "." : "";
  }

  async function refresh() {
    const mine = ++generation;
    const f = filters();
    writeUrl(f);
    if (!depth) depth = STEP;
    let got;
    try {
      got = await read(f, depth);
    } catch (e) {
      if (e.status !== 401 && mine === generation) ST.notice("Could not read the jobs: " + e.message);
      return;
    }
    if (mine !== generation) return; // the filters changed meanwhile: a newer refresh shows them
    ST.notice(null);
    const jobs = got.items;
    showRows(jobs);
    showWindow(f, got);
    const empty = document.getElementById("jobs-empty");
    empty.hidden = jobs.length > 0;
    document.getElementById("jobs").hidden = jobs.length === 0;
    if (!jobs.length) {
      empty.textContent = f.status || f.type || f.model
        ? "No jobs match these filters: clear them to see every job."
        : "No jobs yet: POST /train (Swagger UI at /docs has an example), or run `sparktrain submit " +
          "examples/random-forest-cv.json --wait` with the CLI. Jobs appear here as soon as they are queued.";
    }
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString(undefined, { hour12: false });
  }

  /* Refresh now and every REFRESH_MS; polling stops while the key form is shown (ST.start runs this again). */
  function schedule() {
    clearTimeout(timer);
    timer = null;
    refresh().finally(() => {
      if (!ST.asking() && timer === null) timer = setTimeout(schedule, REFRESH_MS);
    });
  }

  readUrl();
  for (const id of Object.values(FILTERS)) {
    document.getElementById(id).addEventListener("input", () => {
      depth = 0;
      schedule();
    });
  }
  document.getElementById("older").addEventListener("click", () => {
    depth += STEP;
    schedule();
  });
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
  document.getElementById("compare-selected").addEventListener("click", () => {
    location.href = ST.root + "/ui/compare?ids=" + encodeURIComponent([...picked].join(","));
  });
  updateCompare();
  ST.start(schedule);
})();
