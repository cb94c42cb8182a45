/* sparktrain console: the API key, API calls, Server-Sent Events over fetch, and DOM helpers shared by the pages.
 *
 * Everything that comes from the service is put in the page as text (textContent, text nodes), never as HTML.
 * The API key lives in sessionStorage and travels only in the Authorization header: EventSource cannot send
 * headers, so event streams are read with fetch() and parsed here. */
"use strict";

const ST = (() => {
  const root = document.body.dataset.root || "";
  const KEY = "sparktrain.apiKey";
  const OWNER = "sparktrain.owner";
  const NOTICE_MS = 12000;
  let starter = null;
  let transient = false;
  let noticeTimer = null;

  function key() {
    return sessionStorage.getItem(KEY) || "";
  }

  function headers(extra) {
    const out = Object.assign({}, extra || {});
    if (key()) out.Authorization = "Bearer " + key();
    return out;
  }

  class ApiError extends Error {
    constructor(status, problem, retryAfter) {
      super((problem && problem.detail) || "HTTP " + status);
      this.status = status;
      this.problem = problem || {};
      this.retryAfter = Number(retryAfter) || null;
    }
  }

  /* Retry-After in milliseconds (at least a quarter of a second, at most ten), plus up to half a second at random so
   * that the reads a page sent together do not all ask again at the same moment. */
  function retryAfterMs(response) {
    const seconds = Number(response.headers.get("Retry-After"));
    return Math.min(10, Math.max(0.25, Number.isFinite(seconds) ? seconds : 1)) * 1000 + Math.random() * 500;
  }

  async function problemOf(response) {
    try {
      return await response.json();
    } catch (e) {
      return { detail: response.status + " " + response.statusText };
    }
  }

  async function api(path, options) {
    const opts = Object.assign({}, options || {});
    opts.headers = headers(opts.headers);
    if (opts.json !== undefined) {
      opts.body = JSON.stringify(opts.json);
      opts.headers["Content-Type"] = "application/json";
      delete opts.json;
    }
    const method = (opts.method || "GET").toUpperCase();
    const sent = key();
    let response = await fetch(root + path, opts);
    /* Over the key's request rate (429) a read waits as long as the service says and asks again, a few times; a
     * submit or a cancel shows the quota instead of repeating itself. */
    for (let tries = 0; response.status === 429 && method === "GET" && tries < 3; tries++) {
      await sleep(retryAfterMs(response));
      response = await fetch(root + path, opts);
    }
    if (response.status === 401) {
      const problem = await problemOf(response);
      askKey(sent ? "The key was refused: " + problem.detail : null, sent);
      throw new ApiError(401, problem);
    }
    if (!response.ok) throw new ApiError(response.status, await problemOf(response), response.headers.get("Retry-After"));
    if (method !== "GET" && transient) notice(null);  // an action went through: the last one's refusal is stale
    const type = response.headers.get("content-type") || "";
    return type.includes("json") ? response.json() : response;
  }

  /* The page's start function runs now, and again once a key has been entered. */
  function start(fn) {
    starter = fn;
    document.getElementById("forget-key").hidden = !key();
    showWho();
    fn();
  }

  /* The owner the key belongs to, in the header (GET /owners/me/usage), asked once per key and tab. */
  async function showWho() {
    const who = document.getElementById("who");
    who.textContent = "";
    who.title = "";
    if (!key()) return;
    let owner = sessionStorage.getItem(OWNER);
    if (!owner) {
      try {
        owner = (await api("/owners/me/usage")).owner;
      } catch (e) {
        return;  // the header stays empty; a refused key brings the form back (api)
      }
      if (!key()) return;
      sessionStorage.setItem(OWNER, owner);
    }
    who.textContent = owner;
    who.title = "the API key in use belongs to owner " + owner;
  }

  /* Whether the key form is shown: pages that poll stop until a key is given (start runs them again). */
  function asking() {
    return !document.getElementById("key-form").hidden;
  }

  /* Show the key form; `refused` is the key a 401 answered (none: the request had no key). A refused key is of no
   * use to any later request of this tab, unless another one was entered meanwhile. */
  function askKey(error, refused) {
    if (refused && key() === refused) {
      sessionStorage.removeItem(KEY);
      sessionStorage.removeItem(OWNER);
      document.getElementById("forget-key").hidden = true;
      document.getElementById("who").textContent = "";
    }
    document.getElementById("content").hidden = true;
    const form = document.getElementById("key-form");
    form.hidden = false;
    const message = document.getElementById("key-error");
    message.hidden = !error;
    message.textContent = error || "";
    document.getElementById("key-input").focus();
  }

  function setUpKeyForm() {
    document.getElementById("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const input = document.getElementById("key-input");
      sessionStorage.setItem(KEY, input.value.trim());
      sessionStorage.removeItem(OWNER);
      input.value = "";
      document.getElementById("key-form").hidden = true;
      document.getElementById("content").hidden = false;
      if (starter) start(starter);
    });
    document.getElementById("forget-key").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      sessionStorage.removeItem(OWNER);
      location.reload();
    });
  }

  /* Server-Sent Events read with fetch (so the key can go in a header). Reconnects with Last-Event-ID after a
   * dropped connection, so every event arrives once; stops after the "end" event or when signal aborts. */
  async function follow(path, onEvent, signal) {
    let lastId = "";
    for (;;) {
      const sent = key();
      const h = headers({ Accept: "text/event-stream" });
      if (lastId) h["Last-Event-ID"] = lastId;
      let response;
      try {
        response = await fetch(root + path, { headers: h, signal: signal });
      } catch (e) {
        if (signal && signal.aborted) return;
        await sleep(1000);
        continue;
      }
      if (response.status === 401) {
        askKey(sent ? "The key was refused: " + (await problemOf(response)).detail : null, sent);
        return;
      }
      if (response.status === 429 || response.status === 503) {  // over the rate, or the database away: later
        await sleep(retryAfterMs(response));
        continue;
      }
      if (!response.ok) throw new ApiError(response.status, await problemOf(response));
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      let ended = false;
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          const held = buffer.endsWith("\r") ? "\r" : "";
          buffer = buffer.slice(0, buffer.length - held.length).replace(/\r\n?/g, "\n");
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const event = parseEvent(block);
            if (!event) continue;
            if (event.id) lastId = event.id;
            onEvent(event.type, event.data);
            if (event.type === "end") ended = true;
          }
          buffer += held;
          if (ended) {
            reader.cancel();
            return;
          }
        }
      } catch (e) {
        if (signal && signal.aborted) return;
      }
      await sleep(1000);
    }
  }

  function parseEvent(block) {
    let type = "message";
    let id = "";
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") type = value;
      else if (field === "id") id = value;
      else if (field === "data") data.push(value);
    }
    if (!data.length) return null;
    return { type: type, id: id, data: JSON.parse(data.join("\n")) };
  }

  function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  /* el("a", {href: url, class: "x"}, "text", child): children that are strings become text nodes. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "onclick") node.addEventListener("click", value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function badge(status) {
    return el("span", { class: "badge " + status }, status);
  }

  function progress(job) {
    const bar = el("div", { class: "bar" });
    bar.style.width = Math.round(100 * (job.progress || 0)) + "%";
    return el("div", {}, el("div", { class: "progress" }, bar), el("div", { class: "progress-text" }, progressText(job)));
  }

  function time(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    return d.toLocaleString(undefined, { hour12: false });
  }

  function duration(start, end) {
    if (!start) return "—";
    const seconds = Math.max(0, ((end ? new Date(end) : new Date()) - new Date(start)) / 1000);
    if (seconds < 60) return seconds.toFixed(1) + " s";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min " + Math.round(seconds % 60) + " s";
    return Math.floor(seconds / 3600) + " h " + Math.round((seconds % 3600) / 60) + " min";
  }

  /* The notice box above the page. A transient notice (an action refused: a cancel, an alias, a download, often a
   * 429 whose wait is over in a second) goes away after NOTICE_MS, or at the next action that goes through; the
   * others stay until the page clears them (its next read that succeeds). */
  function notice(text, options) {
    const box = document.getElementById("notice");
    clearTimeout(noticeTimer);
    box.hidden = !text;
    box.textContent = text || "";
    transient = Boolean(text && options && options.transient);
    if (transient) noticeTimer = setTimeout(() => notice(null), NOTICE_MS);
  }

  /* What the progress line says: the progress and its message while the job runs or once it succeeded; for a job
   * that failed or was cancelled, where it stopped (its last message is no longer what it is doing). */
  function progressText(job) {
    const percent = Math.round(100 * (job.progress || 0)) + "%";
    const message = job.progress_message || "";
    const stopped = { FAILED: "Failed", CANCELLED: "Cancelled" }[job.status];
    if (stopped) {
      const said = message && !message.toLowerCase().startsWith(stopped.toLowerCase()) ? " (last: " + message + ")" : "";
      return stopped + " at " + percent + said;
    }
    return percent + (message ? " · " + message : "");
  }

  /* An id such as a driver's host:pid:boot, with line breaks allowed after each ':' only. */
  function breakable(text) {
    const parts = String(text).split(":");
    return el("span", { class: "nowrap-parts" }, parts.flatMap((part, i) => (i < parts.length - 1 ? [part + ":", el("wbr")] : [part])));
  }

  function facts(dl, pairs) {
    clear(dl);
    for (const [name, value] of pairs) {
      dl.appendChild(el("dt", {}, name));
      dl.appendChild(el("dd", {}, value instanceof Node ? value : value === null || value === undefined ? "—" : String(value)));
    }
  }

  /* What a QUEUED job held back by its owner's quota waits for, in words (the job's waiting_for), or null. */
  function waitingText(job) {
    if (!job.waiting_for || job.status !== "QUEUED") return null;
    const slots = job.waiting_for === "task_slots" && job.slots ? " (the job needs " + job.slots + " slots)" : "";
    return "waiting: " + job.waiting_for.replace(/_/g, "-") + " quota of owner " + job.owner + slots;
  }

  function jobUrl(id) {
    return root + "/ui/jobs/" + encodeURIComponent(id);
  }

  const ACTIVE = new Set(["QUEUED", "STARTING", "RUNNING", "CANCELLING"]);

  setUpKeyForm();
  return { root, api, ApiError, start, asking, follow, el, clear, badge, progress, progressText, breakable, time,
    duration, notice, facts, jobUrl, waitingText, ACTIVE, sleep, headers };
})();
