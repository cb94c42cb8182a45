/* Models page: every model with its tags and versions (metrics, aliases, tags); set, move and remove aliases;
 * download; delete a version or a model, after a confirmation. */
"use strict";

(() => {
  const { api, el, clear, time } = ST;
  const path = (name) => "/models/" + encodeURIComponent(name);

  function metricsText(metrics) {
    const parts = [];
    for (const [k, v] of Object.entries(metrics || {})) {
      if (typeof v === "number") parts.push(k + " " + Number(v.toPrecision(4)));
    }
    return parts.slice(0, 6).join(", ") || "—";
  }

  /* The formats GET .../artifact serves (the version's "formats"), as the buttons name them. */
  const FORMATS = {
    archive: ["Native", "the model directory as .tar.gz (a torch model loads without sparktrain)"],
    mlflow: ["MLflow", "the MLflow model directory as .zip (mlflow.pyfunc.load_model)"],
    onnx: ["ONNX", "model.onnx and its sidecar as .zip (the first download exports it)"],
  };
  const MAX_EXPORT_WAITS = 12;
  let scrolled = false; // whether the page went to the card its URL's #name names

  function filenameOf(response, fallback) {
    const match = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
    return match ? match[1] : fallback;
  }

  /* fetch() with the key in the Authorization header, the body saved from a Blob: the key never goes in a URL. An
   * ONNX export still running (503 with Retry-After) is asked again. */
  async function download(name, version, format, button) {
    const label = button.textContent;
    button.disabled = true;
    try {
      let response;
      for (let waits = 0; ; waits++) {
        try {
          response = await api(path(name) + "/versions/" + version + "/artifact?format=" + encodeURIComponent(format));
          break;
        } catch (e) {
          if (e.status !== 503 || !e.retryAfter || waits >= MAX_EXPORT_WAITS) throw e;
          button.textContent = "exporting…";
          await ST.sleep(Math.min(e.retryAfter, 10) * 1000);
        }
      }
      const url = URL.createObjectURL(await response.blob());
      const link = el("a", { href: url, download: filenameOf(response, name + "-v" + version + "-" + format) });
      document.body.appendChild(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
      ST.notice(null);
    } catch (e) {
      ST.notice("Download of " + name + " v" + version + " (" + format + "): " + e.message, { transient: true });
    } finally {
      button.textContent = label;
      button.disabled = false;
    }
  }

  function downloads(model, v) {
    return el("div", { class: "downloads" }, (v.formats || ["archive"]).map((format) => {
      const [label, what] = FORMATS[format] || [format, format];
      const button = el("button", { type: "button", "data-format": format, title: "Download " + what }, label);
      button.addEventListener("click", () => download(model.name, v.version, format, button));
      return button;
    }));
  }

  /* An alias is required (an empty one would PUT /models/x/aliases/, a 404); the service's refusal shows once, under
   * the form, and the alias typed stays in the field to be corrected. */
  function aliasForm(model) {
    const alias = el("input", { placeholder: "alias, e.g. champion", "aria-label": "alias", required: true, maxlength: 100 });
    const version = el("select", { "aria-label": "version" }, model.versions.map((v) => el("option", { value: v.version }, "v" + v.version)).reverse());
    const error = el("p", { class: "error alias-error", role: "alert", hidden: true });
    const form = el("form", { class: "alias-form" }, "Point alias ", alias, " at ", version, el("button", { type: "submit" }, "Set"), error);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const name = alias.value.trim();
      if (!name) return;
      try {
        await api(path(model.name) + "/aliases/" + encodeURIComponent(name), { method: "PUT", json: { version: Number(version.value) } });
        error.hidden = true;
        refresh();
      } catch (e) {
        if (e.status === 401) return;
        error.hidden = false;
        error.textContent = "Alias \u201c" + name + "\u201d was not set: " + reason(e) + ".";
      }
    });
    return form;
  }

  /* The service's words without the field's name in front ("alias: letters, digits, ..."). */
  function reason(e) {
    const errors = e.problem && e.problem.errors;
    const text = errors && errors.length === 1 && errors[0].msg ? errors[0].msg : e.message;
    return String(text).replace(/^alias: /, "").replace(/\.$/, "");
  }

  function aliasList(model) {
    const entries = Object.entries(model.aliases || {});
    if (!entries.length) return el("p", { class: "muted" }, "No aliases: set one below (clients can then ask for the model by alias).");
    return el("p", {}, "Aliases: ", entries.map(([alias, version]) => {
      const remove = el("button", { type: "button", class: "link-button", title: "remove " + alias }, "×");
      remove.addEventListener("click", async () => {
        try {
          await api(path(model.name) + "/aliases/" + encodeURIComponent(alias), { method: "DELETE" });
          refresh();
        } catch (e) {
          if (e.status !== 401) ST.notice("Alias " + alias + " was not removed: " + e.message, { transient: true });
        }
      });
      return el("span", { class: "badge" }, alias + " → v" + version + " ", remove);
    }));
  }

  const TAG_SHOWN = 80; // characters of a tag's value in its badge (a value holds up to 5,000): the rest in its title

  /* A tag as "key = value" (a tag with an empty value is a label: its key alone). */
  function tagBadge(key, value) {
    const cut = value.length > TAG_SHOWN ? value.slice(0, TAG_SHOWN) + "…" : value;
    return el("span", { class: "badge tag", "data-key": key, title: value ? key + " = " + value : key },
      value ? key + " = " + cut : key);
  }

  function tagBadges(tags) {
    return Object.keys(tags || {}).sort().map((key) => tagBadge(key, tags[key]));
  }

  function modelTags(model) {
    const badges = tagBadges(model.tags);
    return badges.length ? el("p", { class: "model-tags" }, "Tags: ", badges) : null;
  }

  /* The version's number and the model's aliases that name it. */
  function versionCell(v) {
    const aliases = (v.aliases || []).slice().sort().map((alias) => el("span", { class: "badge alias", "data-alias": alias }, alias));
    return el("td", { class: "version" }, "v" + v.version, aliases.length ? el("div", { class: "labels" }, aliases) : null);
  }

  /* DELETE after a confirmation. A refusal shows under the model's heading, with the jobs a 409 names (unfinished
   * jobs that use what would go), each linked to its page. */
  async function deleteEntry(model, version, refusal) {
    const what = version === null ? "model " + model.name : model.name + " v" + version;
    const count = model.versions.length;
    const goes = version === null
      ? " with " + (count === 1 ? "its version" : "its " + count + " versions") + ", aliases and tags? Its files are removed and the name is free again."
      : "? Its aliases and tags go with it, its files are removed, and its number is never given again.";
    if (!window.confirm("Delete " + what + goes)) return;
    try {
      await api(path(model.name) + (version === null ? "" : "/versions/" + version), { method: "DELETE" });
      refresh();
    } catch (e) {
      if (e.status === 401) return;
      const jobs = e.problem && Array.isArray(e.problem.jobs) ? e.problem.jobs : [];
      clear(refusal).hidden = false;
      refusal.append(el("p", {}, (version === null ? "Model " + model.name : what) + " was not deleted: " + e.message));
      if (jobs.length) {
        refusal.append(el("p", {}, jobs.length === 1 ? "The job that uses it:" : "The jobs that use it:"),
          el("ul", { class: "in-use" }, jobs.map((id) => el("li", {}, el("a", { href: ST.jobUrl(id), "data-job": id }, id)))));
      }
    }
  }

  function deleteButton(model, version, refusal) {
    const title = version === null ? "Delete the model: every version, alias and tag" : "Delete v" + version + " (its aliases and tags go with it)";
    const button = el("button", { type: "button", class: "delete", title: title }, version === null ? "Delete model" : "Delete");
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        await deleteEntry(model, version, refusal);
      } finally {
        button.disabled = false;
      }
    });
    return button;
  }

  function card(model) {
    const refusal = el("div", { class: "error delete-error", role: "alert", hidden: true });
    const rows = model.versions.slice().reverse().map((v) => el("tr", { "data-version": v.version },
      versionCell(v), el("td", {}, v.framework), el("td", {}, time(v.created_at)),
      el("td", {}, metricsText(v.metrics)), el("td", { class: "tags" }, tagBadges(v.tags)),
      el("td", {}, v.job_id ? el("a", { href: ST.jobUrl(v.job_id) }, v.job_id.slice(0, 12)) : "—"), el("td", {}, downloads(model, v)),
      el("td", {}, deleteButton(model, v.version, refusal))));
    const columns = ["version", "framework", "created", "metrics", "tags", "job", "download", "delete"];
    return el("div", { class: "model", id: model.name },
      el("div", { class: "model-head" },
        el("h2", {}, model.name, " ", el("span", { class: "muted" }, "owner " + model.owner)), deleteButton(model, null, refusal)),
      refusal,
      modelTags(model),
      aliasList(model),
      el("table", { class: "small versions" }, el("colgroup", {}, columns.map((c) => el("col", { class: c }))),
        el("thead", {}, el("tr", {}, ["Version", "Framework", "Created", "Metrics", "Tags", "Training job", "Download", ""].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)),
      aliasForm(model));
  }

  /* Every model, by name, following next_cursor (GET /models answers a page of at most `limit`). */
  async function everyModel() {
    const items = [];
    let cursor = null;
    do {
      const page = await api("/models?limit=100" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
      items.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor);
    return items;
  }

  async function refresh() {
    let items;
    try {
      items = await everyModel();
    } catch (e) {
      if (e.status !== 401) ST.notice("Could not read the models: " + e.message);
      return;
    }
    const box = clear(document.getElementById("models"));
    items.forEach((m) => box.appendChild(card(m)));
    const empty = document.getElementById("models-empty");
    empty.hidden = items.length > 0;
    empty.textContent = "No models yet: a training job that succeeds registers its model here (POST /train, or " +
      "`sparktrain submit examples/xgboost-taxi.json --wait`).";
    if (!scrolled) scrollToHash();
  }

  /* A link to /ui/models#name names a card that did not exist when the browser looked for it: go there now. */
  function scrollToHash() {
    scrolled = true;
    const target = location.hash.length > 1 ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    if (target) target.scrollIntoView({ block: "start" });
  }

  ST.start(refresh);
})();
