/* Cluster page: the Spark master and application, executors with cores, memory and GPUs, RAPIDS, versions. */
"use strict";

(() => {
  const { api, el, clear, facts } = ST;

  function bytes(n) {
    if (!n) return "0";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }

  async function load() {
    let c;
    try {
      c = await api("/cluster");
    } catch (e) {
      if (e.status !== 401) ST.notice("Could not read the cluster: " + e.message);
      return;
    }
    const gpus = Object.values(c.gpu_addresses || {}).reduce((n, list) => n + list.length, 0);
    facts(document.getElementById("cluster-facts"), [
      ["Master", c.master], ["Application", c.app_id + " (" + c.app_name + ")"], ["Spark", c.spark_version],
      ["Task slots", c.task_slots], ["Default parallelism", c.default_parallelism],
      ["GPUs", gpus ? gpus + " (" + Object.entries(c.gpu_addresses).map(([k, v]) => k + ": " + v.join(",")).join("; ") + ")" : "none"],
    ]);
    const body = clear(document.querySelector("#executors tbody"));
    for (const e of c.executors) {
      body.appendChild(el("tr", {}, el("td", {}, e.id), el("td", {}, e.host_port), el("td", {}, e.cores),
        el("td", {}, bytes(e.max_memory_bytes)), el("td", {}, e.active_tasks), el("td", {}, (e.resources.gpu || []).join(", ") || "—")));
    }
    const r = c.rapids;
    facts(document.getElementById("rapids"), r ? [["Active", r.active ? "yes" : "no"], ["Why not", r.reason], ["Profile", r.profile], ["Jar", r.jar]]
      : [["Status", "unknown"]]);
    facts(document.getElementById("driver"), Object.entries(c.driver).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") || "none" : v]));
    facts(document.getElementById("versions"), Object.entries(c.versions));
  }

  ST.start(load);
})();
