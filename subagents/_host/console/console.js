// The subagents web console: plain JavaScript, no dependencies, no build step.
// Views (by the location hash): #/ sessions, #/session/<id>[?page=N|?run=<run_id>],
// #/attempt/<id>. Data comes from /console/api/*; live updates from the session's
// committed event stream (/events, SSE), resumed from the last sequence on reconnect.
// Everything from the store is put in the page as text (never as HTML).
"use strict";

const state = { route: null, stream: null, refresh: null, rendered: false, cancels: {} };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children) node.append(child);
  return node;
}

const enc = encodeURIComponent;
const short = (id) => (id ? (id.length > 14 ? id.slice(0, 12) + "…" : id) : "");
const clock = (at) => (at ? new Date(at * 1000).toISOString().slice(11, 23) : "—");
const stamp = (at) => (at ? new Date(at * 1000).toISOString().replace("T", " ").slice(0, 23) : "—");
const sessionHref = (id, extra) => "#/session/" + enc(id) + (extra || "");
const attemptHref = (id) => "#/attempt/" + enc(id);
const runHref = (sessionId, runId) => sessionHref(sessionId, "?run=" + enc(runId));

function parseRoute() {
  const hash = window.location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "session" && parts[1]) return { view: "session", id: parts[1], params };
  if (parts[0] === "attempt" && parts[1]) return { view: "attempt", id: parts[1], params };
  return { view: "sessions", params };
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(body.error || "HTTP " + response.status);
    error.status = response.status;
    throw error;
  }
  return body;
}

function setCrumbs(items) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(...items.map(([text, href]) => el("a", { href }, text)));
}

function markRendered(view) {
  document.body.dataset.view = view;
  if (!state.rendered) {
    state.rendered = true;
    performance.mark("console-rendered");
  }
  document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
}

// -- sessions ------------------------------------------------------------------------------

function renderSessions(data) {
  setCrumbs([["sessions", "#/"]]);
  const rows = data.sessions.map((s) =>
    el("tr", { "data-session": s.session_id },
      el("td", {}, el("a", { href: sessionHref(s.session_id) }, s.session_id)),
      el("td", { class: "status " + s.status }, s.status),
      el("td", {}, s.profile || "—"),
      el("td", { class: "num", "data-testid": "run-count" }, s.runs),
      el("td", { class: "num" }, s.continuation_runs),
      el("td", { class: "num", "data-testid": "attempt-count" }, s.attempts),
      el("td", { class: "num" }, s.active_attempts),
      el("td", {}, stamp(s.updated_at))));
  return el("section", {},
    el("h2", {}, "Sessions ", el("span", { class: "muted" }, "namespace " + data.namespace_id)),
    rows.length
      ? el("table", { class: "grid", "data-testid": "sessions" },
        el("thead", {}, el("tr", {}, ["session", "status", "profile", "runs", "continuations",
          "attempts", "active", "updated"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows))
      : el("p", { class: "muted" }, "No sessions yet."));
}

// -- session timeline ----------------------------------------------------------------------

function bar(axis, row) {
  const span = Math.max(axis.end - axis.start, 1e-6);
  const start = Math.max(0, (row.start - axis.start) / span);
  const end = Math.min(1, ((row.end === null ? axis.end : row.end) - axis.start) / span);
  const cls = row.kind === "run" ? "bar run " + row.status : "bar phase-" + row.phase;
  return el("div", {
    class: cls + (row.end === null ? " open" : ""),
    style: null,
    "data-left": (start * 100).toFixed(2),
    "data-width": (Math.max(end - start, 0.004) * 100).toFixed(2),
    title: stamp(row.start) + " → " + (row.end === null ? "now" : stamp(row.end)),
  });
}

function runLabel(sessionId, row) {
  const continuation = row.trigger_type === "async_subagent_result";
  return el("div", { class: "label" },
    el("span", { class: "seq" }, "#" + row.sequence_no),
    el("strong", {}, " run " + short(row.run_id) + " "),
    el("span", { class: "trigger" + (continuation ? " continuation" : ""), "data-testid": "trigger" },
      row.trigger_type || "—"),
    " ",
    el("span", { class: "status " + row.status, "data-testid": "run-status" }, row.status),
    row.parent_run_id
      ? el("span", { class: "cause" }, " ← ",
        el("a", { href: runHref(sessionId, row.parent_run_id), "data-testid": "parent-link" },
          "parent " + short(row.parent_run_id)))
      : null,
    row.cause_attempt_id
      ? el("span", { class: "cause" }, " (result of ",
        el("a", { href: attemptHref(row.cause_attempt_id) }, "attempt " + short(row.cause_attempt_id)),
        ")")
      : null,
    el("div", { class: "muted io" }, row.input, row.output ? " ⇒ " + row.output : ""));
}

function laneLabel(sessionId, row) {
  return el("div", { class: "label lane-label" },
    "↳ ",
    el("a", { href: attemptHref(row.attempt_id), "data-testid": "attempt-link" },
      row.subagent_name + " " + short(row.attempt_id)),
    " ",
    el("span", { class: "phase phase-" + row.phase, "data-testid": "phase" }, row.phase),
    el("span", { class: "muted" }, " " + row.execution_status +
      (row.failure_category && row.failure_category !== "cancelled" ? " (" + row.failure_category + ")" : "") +
      " · " + row.delivery_status),
    row.continuation_run_id
      ? el("span", { class: "cause" }, " → ",
        el("a", { href: runHref(sessionId, row.continuation_run_id), "data-testid": "continuation-link" },
          "continuation run " + short(row.continuation_run_id)))
      : null);
}

function pager(data) {
  const go = (page) => sessionHref(data.session.session_id, "?page=" + page);
  const last = data.pages - 1;
  return el("nav", { class: "pager", "data-testid": "pager" },
    el("span", {},
      data.page > 0 ? el("a", { href: go(0) }, "⇤ first") : null, " ",
      data.page > 0 ? el("a", { href: go(data.page - 1), "data-testid": "previous-page" },
        "← earlier rows") : null),
    el("span", {}, "page " + (data.page + 1) + " of " + data.pages + " · " + data.total_rows + " rows"),
    el("span", {},
      data.page < last ? el("a", { href: go(data.page + 1), "data-testid": "next-page" },
        "later rows →") : null, " ",
      data.page < last ? el("a", { href: go(last) }, "latest ⇥") : null));
}

function renderSession(data, route) {
  const s = data.session;
  setCrumbs([["sessions", "#/"], [s.session_id, sessionHref(s.session_id)]]);
  const phases = Object.entries(data.summary.phases).map(([phase, count]) =>
    el("span", { class: "phase phase-" + phase }, phase + " " + count));
  const focus = route.params.get("run");
  const rows = data.rows.map((row) => {
    const isRun = row.kind === "run";
    const track = el("div", { class: "track" }, bar(data.axis, row));
    return el("div", {
      class: "row " + (isRun ? "run-row" : "lane") + (isRun && row.run_id === focus ? " focus" : ""),
      id: isRun ? "run-" + row.run_id : "attempt-" + row.attempt_id,
      "data-run": isRun ? row.run_id : row.parent_run_id,
      "data-attempt": isRun ? null : row.attempt_id,
      "data-testid": isRun ? "run" : "lane",
    }, isRun ? runLabel(s.session_id, row) : laneLabel(s.session_id, row), track);
  });
  const section = el("section", {},
    el("h2", {}, "Session " + s.session_id + " ",
      el("span", { class: "status " + s.status }, s.status)),
    el("p", { class: "summary", "data-testid": "summary" },
      data.summary.runs + " runs · " + data.summary.attempts + " attempts ", ...phases),
    pager(data),
    el("div", { class: "axis muted" }, el("span", {}, clock(data.axis.start)),
      el("span", {}, clock(data.axis.end))),
    el("div", { class: "timeline", "data-testid": "timeline" }, rows),
    data.pages > 1 ? pager(data) : null);
  // Bar geometry is set through the CSSOM (the CSP allows no inline style attributes).
  for (const node of section.querySelectorAll(".bar")) {
    node.style.left = node.dataset.left + "%";
    node.style.width = node.dataset.width + "%";
  }
  if (focus) requestAnimationFrame(() => document.getElementById("run-" + focus)?.scrollIntoView());
  return section;
}

// -- attempt -------------------------------------------------------------------------------

function layers(machine) {
  const depth = { [machine.initial]: 0 };
  for (const entry of machine.entries) depth[entry] = 0;
  const queue = [machine.initial, ...machine.entries];
  while (queue.length) {
    const state = queue.shift();
    for (const t of machine.transitions) {
      if (t.source === state && depth[t.dest] === undefined) {
        depth[t.dest] = depth[state] + 1;
        queue.push(t.dest);
      }
    }
  }
  for (const s of machine.states) if (depth[s] === undefined) depth[s] = 0;
  return depth;
}

function diagram(machine, current) {
  const depth = layers(machine);
  const columns = {};
  const pos = {};
  for (const s of machine.states) {
    const d = depth[s];
    columns[d] = (columns[d] || 0) + 1;
    pos[s] = { x: 20 + d * 150, y: 20 + (columns[d] - 1) * 52 };
  }
  const height = 70 + Math.max(...Object.values(columns)) * 52;
  const width = 40 + (Math.max(...Object.values(depth)) + 1) * 150;
  const root = svg("svg", { viewBox: "0 0 " + width + " " + height, width, height,
    class: "diagram", role: "img", "aria-label": machine.name + " lifecycle" });
  const marker = svg("marker", { id: "arrow-" + machine.name, viewBox: "0 0 10 10", refX: 10,
    refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
  svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }));
  root.append(svg("defs", {}, marker));
  const seen = {};
  for (const t of machine.transitions) {
    const a = pos[t.source];
    const b = pos[t.dest];
    const key = t.source + ">" + t.dest;
    if (seen[key]) continue;
    seen[key] = true;
    const same = b.x === a.x;
    const back = b.x < a.x;
    let d;
    let label;
    if (same) { // a column: straight down (or up), centre to centre
      const down = b.y > a.y;
      const x = a.x + 55;
      d = "M " + x + " " + (down ? a.y + 32 : a.y) + " L " + x + " " + (down ? b.y : b.y + 32);
      label = [x + 4, (a.y + b.y) / 2 + 20];
    } else if (back) { // backwards: under both boxes
      const y = Math.max(a.y, b.y) + 32;
      d = "M " + (a.x + 40) + " " + (a.y + 32) + " C " + (a.x + 40) + " " + (y + 28) + " " +
        (b.x + 70) + " " + (y + 28) + " " + (b.x + 70) + " " + (b.y + 32);
      label = [(a.x + b.x) / 2 + 55, y + 24];
    } else {
      const y1 = a.y + 16;
      const y2 = b.y + 16;
      d = "M " + (a.x + 110) + " " + y1 + " L " + b.x + " " + y2;
      label = [(a.x + 110 + b.x) / 2, (y1 + y2) / 2 - 4];
    }
    root.append(svg("path", { d, class: "edge", "marker-end": "url(#arrow-" + machine.name + ")" }));
    root.append(svg("text", { x: label[0], y: label[1], class: "trigger-label" + (same ? " side" : ""),
      text: t.trigger }));
  }
  for (const s of machine.states) {
    const cls = "state" + (s === current ? " current" : "") +
      (machine.terminal.includes(s) ? " terminal" : "");
    const group = svg("g", { class: cls, "data-state": s });
    group.append(svg("rect", { x: pos[s].x, y: pos[s].y, width: 110, height: 32, rx: 6 }));
    group.append(svg("text", { x: pos[s].x + 55, y: pos[s].y + 21, text: s }));
    root.append(group);
  }
  return el("figure", { class: "machine", "data-machine": machine.name,
    "data-current": current, "data-testid": "machine-" + machine.name },
  el("figcaption", {}, el("strong", {}, machine.name), " — " + machine.description), root);
}

function table(testid, headers, rows) {
  if (!rows.length) return el("p", { class: "muted", "data-testid": testid }, "none");
  return el("table", { class: "grid", "data-testid": testid },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => el("td", {}, c))))));
}

function facts(testid, pairs) {
  return el("dl", { class: "facts", "data-testid": testid },
    pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v === null || v === undefined ? "—" : v)]));
}

function cancelButton(data) {
  // The reply is kept per attempt: a live redraw must not lose it.
  const id = data.attempt.attempt_id;
  const out = el("span", { class: "muted", "data-testid": "cancel-result" }, state.cancels[id] || "");
  const button = el("button", {
    type: "button", "data-testid": "cancel", disabled: id in state.cancels,
    onclick: async () => {
      button.disabled = true;
      state.cancels[id] = "";
      const response = await fetch("/console/api/cancel", {
        method: "POST", credentials: "same-origin",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ attempt_id: id, reason: "cancelled in the console" }),
      });
      const body = await response.json().catch(() => ({}));
      state.cancels[id] = response.ok ? "→ " + body.status : "refused: " + (body.error || response.status);
      const shown = document.querySelector("[data-testid=cancel-result]");
      if (shown) shown.textContent = state.cancels[id];
      scheduleRefresh();
    },
  }, "Cancel attempt");
  return el("p", {}, button, " ", out);
}

function renderAttempt(data) {
  const a = data.attempt;
  setCrumbs([["sessions", "#/"], [data.session_id, sessionHref(data.session_id)],
    [a.subagent_name + " " + short(a.attempt_id), attemptHref(a.attempt_id)]]);
  const result = data.result;
  const machines = data.machines.map((m) => diagram(m, data.current[m.name]));
  return el("section", { "data-attempt": a.attempt_id },
    el("h2", {}, "Attempt " + a.attempt_id + " ",
      el("span", { class: "phase phase-" + a.phase, "data-testid": "attempt-phase" }, a.phase)),
    el("p", {}, "subagent ", el("strong", {}, a.subagent_name), " · delegated by ",
      el("a", { href: runHref(data.session_id, a.parent_run_id), "data-testid": "delegating-run" },
        "run " + short(a.parent_run_id)),
      data.failure_category ? " · failure: " + data.failure_category : "",
      data.cancellation_reason ? " · cancelled: " + data.cancellation_reason : ""),
    data.cancellable || a.attempt_id in state.cancels ? cancelButton(data) : null,
    el("div", { class: "machines" }, machines),
    el("h3", {}, "Transitions"),
    table("transitions", ["time", "machine", "to", "note"],
      data.transitions.map((t) => [stamp(t.at), t.machine, t.to, t.note])),
    el("div", { class: "columns" },
      el("div", {}, el("h3", {}, "Lease"), facts("lease", [
        ["holder", data.lease.holder], ["generation", String(data.lease.generation)],
        ["heartbeat", stamp(data.lease.heartbeat_at)], ["expires", stamp(data.lease.expires_at)],
        ["live", data.lease.live ? "yes" : "no"]])),
      el("div", {}, el("h3", {}, "Delivery"), facts("delivery", [
        ["status", a.delivery_status],
        ["claim", data.claim ? data.claim.claim_id + " until " + stamp(data.claim.deadline) : null],
        ["delivered claim", data.delivered_claim_id],
        ["consumer run", data.consumer_run
          ? el("a", { href: runHref(data.session_id, data.consumer_run.run_id),
            "data-testid": "consumer-run" },
          short(data.consumer_run.run_id) + " (" + data.consumer_run.status + ")")
          : null]])),
      el("div", {}, el("h3", {}, "Retention"), facts("retention", [
        ["status", data.retention.status], ["expires", stamp(data.retention.expires_at)]]))),
    el("h3", {}, "Result"),
    result
      ? el("div", { "data-testid": "result" },
        facts("result-facts", [["digest", result.digest], ["size", result.size_bytes + " bytes"],
          ["artifact", el("a", { href: "/console/api/artifact?attempt_id=" + enc(a.attempt_id),
            target: "_blank", rel: "noopener" }, result.artifact_ref ? "artifact " +
            short(result.artifact_ref) : "full result")]]),
        el("pre", { class: "preview" + (result.is_error ? " error" : "") },
          result.preview + (result.truncated ? "\n…" : "")))
      : el("p", { class: "muted", "data-testid": "result" }, "no result yet"),
    el("h3", {}, "Steering receipts"),
    table("steering", ["steering id", "time", "message", "reached the child"],
      data.steering.map((r) => [r.steering_id, stamp(r.at), r.text_preview,
        r.reached_child ? "yes" : "not recorded"])),
    el("h3", {}, "Events of its runs"),
    table("attempt-events", ["seq", "time", "kind", "run"],
      data.events.map((e) => [String(e.seq), stamp(e.at), e.kind, short(e.run_id)])));
}

// -- live ------------------------------------------------------------------------------------

function setLive(mode, text) {
  const badge = document.getElementById("live");
  badge.className = "live " + mode;
  badge.textContent = text;
  document.body.dataset.live = mode;
}

function logEvent(event) {
  const list = document.getElementById("events");
  document.getElementById("events-panel").hidden = false;
  list.prepend(el("li", { "data-seq": event.seq },
    el("code", {}, "#" + event.seq), " " + clock(event.at) + " ", el("strong", {}, event.kind),
    event.run_id ? " " + short(event.run_id) : ""));
  while (list.children.length > 40) list.lastChild.remove();
}

function follow(sessionId, after) {
  if (state.stream && state.stream.sessionId === sessionId) return;
  stopFollowing();
  const stream = { sessionId, last: after, stopped: false, controller: null, retry: 1000 };
  state.stream = stream;
  document.getElementById("events").replaceChildren();
  const loop = async () => {
    while (!stream.stopped) {
      stream.controller = new AbortController();
      try {
        const response = await fetch("/events?session_id=" + enc(sessionId), {
          headers: { "last-event-id": String(stream.last) },
          credentials: "same-origin", cache: "no-store", signal: stream.controller.signal,
        });
        if (response.status === 401) { setLive("error", "logged out"); return; }
        if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
        setLive("open", "live · seq " + stream.last);
        await readEvents(stream, response.body.getReader());
      } catch (error) {
        if (stream.stopped) return;
      }
      if (stream.stopped) return;
      setLive("reconnecting", "reconnecting · resumes after seq " + stream.last);
      await new Promise((resolve) => setTimeout(resolve, stream.retry));
    }
  };
  loop();
}

async function readEvents(stream, reader) {
  const decoder = new TextDecoder();
  let buffer = "";
  let fields = {};
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, cut).replace(/\r$/, "");
      buffer = buffer.slice(cut + 1);
      if (line === "") {
        dispatch(stream, fields);
        fields = {};
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        fields[name] = name === "data" && fields.data !== undefined ? fields.data + "\n" + text : text;
      }
    }
  }
}

function dispatch(stream, fields) {
  if (fields.retry && /^\d+$/.test(fields.retry)) stream.retry = Number(fields.retry);
  if (fields.data === undefined) return;
  if (fields.event === "stream.overflow") return; // the loop reconnects from stream.last
  const event = JSON.parse(fields.data);
  if (typeof event.seq === "number" && event.seq > stream.last) stream.last = event.seq;
  setLive("open", "live · seq " + stream.last);
  document.body.dataset.lastSeq = String(stream.last);
  logEvent(event);
  scheduleRefresh();
}

function stopFollowing() {
  if (!state.stream) return;
  state.stream.stopped = true;
  if (state.stream.controller) state.stream.controller.abort();
  state.stream = null;
  setLive("idle", "not following");
}

function scheduleRefresh() {
  if (state.refresh) return;
  state.refresh = setTimeout(() => {
    state.refresh = null;
    show(false);
  }, 150);
}

// -- router ----------------------------------------------------------------------------------

async function show(navigated) {
  const route = parseRoute();
  const view = document.getElementById("view");
  try {
    let node;
    if (route.view === "session") {
      const query = "?session_id=" + enc(route.id) +
        (route.params.get("run") ? "&run_id=" + enc(route.params.get("run")) : "") +
        "&page=" + (Number(route.params.get("page")) || 0);
      const data = await api("/console/api/session" + query);
      node = renderSession(data, route);
      follow(route.id, data.last_seq);
    } else if (route.view === "attempt") {
      const data = await api("/console/api/attempt?attempt_id=" + enc(route.id));
      node = renderAttempt(data);
      follow(data.session_id, data.last_seq);
    } else {
      stopFollowing();
      node = renderSessions(await api("/console/api/sessions"));
    }
    const scroll = window.scrollY;
    view.replaceChildren(node);
    if (!navigated) window.scrollTo(0, scroll);
    markRendered(route.view);
  } catch (error) {
    if (!navigated && state.stream) return; // keep the last picture while the host is away
    view.replaceChildren(el("p", { class: "error", "data-testid": "error" },
      error.status === 401 ? "Not logged in: open the one-time console link that " +
        "`subagents serve --http` printed." : "Could not load: " + error.message));
    markRendered("error");
  }
}

document.addEventListener("securitypolicyviolation", (event) => {
  // Nothing here should ever trip the CSP; the browser test checks this stays unset.
  document.body.dataset.cspViolation = event.violatedDirective + " " + event.blockedURI;
});
window.addEventListener("hashchange", () => show(true));
show(true);
