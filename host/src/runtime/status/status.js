// The status page of a krec host. It reads `GET /guests` (each guest's state, figures, last
// error, rollout and last reconciles: what `krec top` reads) every two seconds and draws it.
// What guests wrote (error messages, keys, diffs) is only ever set as text, never as HTML.
"use strict";

const EVERY_MS = 2000;
const TOKEN_KEY = "krec-admin-token";
/** The last two answers: rates are over the time between them. */
let before = null;
let latest = null;
/** The guest whose last reconciles are shown. */
let selected = null;

/** An element with `attrs` (class, data-*, …) and children (strings become text). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function $(id) {
  return document.getElementById(id);
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** `#token=…` in the address (never sent to the server) is kept for this tab and removed. */
function takeTokenFromAddress() {
  const found = location.hash.match(/^#token=(.+)$/);
  if (found) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(found[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function problem(text) {
  $("problem").textContent = text;
  $("problem").hidden = !text;
}

async function poll() {
  const headers = {};
  const given = token();
  if (given) headers.Authorization = "Bearer " + given;
  let answer;
  try {
    answer = await fetch("guests", { headers, cache: "no-store" });
  } catch (err) {
    problem("The host does not answer: " + err.message);
    return;
  }
  if (answer.status === 401) {
    $("login").hidden = false;
    $("content").hidden = true;
    problem(given ? "The host refused that token." : "");
    $("updated").textContent = "needs its admin token";
    return;
  }
  const text = await answer.text();
  if (!answer.ok) {
    problem(`GET /guests answered ${answer.status}: ${text.trim()}`);
    return;
  }
  let now;
  try {
    now = JSON.parse(text);
  } catch (err) {
    problem("GET /guests answered what is not JSON: " + err.message);
    return;
  }
  problem("");
  $("login").hidden = true;
  $("content").hidden = false;
  before = latest;
  latest = now;
  draw(before, now);
}

async function loop() {
  await poll();
  setTimeout(loop, EVERY_MS);
}

// ---------------------------------------------------------------------------------------------
// Figures

/** The `q` quantile of per-bucket `counts` (the last over every bound) with upper `bounds`,
 *  interpolated in its bucket as Prometheus' histogram_quantile does; null without a count. */
function quantile(q, bounds, counts) {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < counts.length; i++) {
    const count = counts[i];
    if (count > 0 && below + count >= rank) {
      if (i >= bounds.length) return bounds[bounds.length - 1];
      const lower = i === 0 ? 0 : bounds[i - 1];
      return lower + (bounds[i] - lower) * ((rank - below) / count);
    }
    below += count;
  }
  return bounds[bounds.length - 1];
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 0.001) return (value * 1e6).toFixed(0) + " µs";
  if (value < 1) return (value * 1000).toFixed(value < 0.01 ? 2 : 1) + " ms";
  return value.toFixed(2) + " s";
}

function bytes(value) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (value >= 1024 && i < units.length - 1) {
    value /= 1024;
    i++;
  }
  return (i === 0 ? value.toFixed(0) : value.toFixed(1)) + " " + units[i];
}

function when(unixMs) {
  return new Date(unixMs).toLocaleTimeString();
}

/** One guest's figures, with rates over the time since the previous answer. */
function figures(guest, bounds, earlier, elapsed) {
  const running = guest.running;
  if (!running) return null;
  const previous = earlier && earlier.guests.find((g) => g.name === guest.name);
  // Counts start again with each version: a rate across a swap is unknown.
  const then = previous && previous.running && previous.running.version === running.version
    ? previous.running
    : null;
  const rate = (now, earlier) => (then && elapsed > 0 ? Math.max(0, (now - earlier) / elapsed) : null);
  const cpu = (r) => r.cpuSeconds.wasm + r.cpuSeconds.host;
  const window = then && then.durations.length === running.durations.length
    ? running.durations.map((n, i) => Math.max(0, n - then.durations[i]))
    : running.durations;
  return {
    rate: rate(running.reconciles.total, then && then.reconciles.total),
    cpu: rate(cpu(running), then && cpu(then)),
    p99: quantile(0.99, bounds, window),
  };
}

// ---------------------------------------------------------------------------------------------
// Drawing

function draw(earlier, now) {
  const elapsed = earlier ? (now.unixMs - earlier.unixMs) / 1000 : 0;
  $("updated").textContent = "updated " + when(now.unixMs);
  drawGuests(earlier, now, elapsed);
  drawDetail(now);
  drawErrors(now);
  drawRollouts(now);
}

function drawGuests(earlier, now, elapsed) {
  const rows = now.guests.map((guest) => {
    const r = guest.running;
    const f = figures(guest, now.durationBounds, earlier, elapsed);
    const cells = r
      ? [
          String(r.version),
          String(r.reconciles.total),
          f.rate === null ? "–" : f.rate.toFixed(1),
          String(r.reconciles.errors),
          String(r.reconciles.traps),
          seconds(f.p99),
          String(r.queueDepth),
          `${r.active}/${r.maxConcurrent}`,
          String(r.quarantined),
          f.cpu === null ? "–" : (f.cpu * 100).toFixed(1) + " %",
          bytes(r.memoryBytes),
        ]
      : Array(11).fill("–");
    const rollout = r && r.rollout ? `${r.rollout.mode} ${r.rollout.phase}` : "–";
    const state = el("td", { class: "state-" + guest.state, title: guest.reason }, guest.state);
    return el(
      "tr",
      { "data-guest": guest.name, class: guest.name === selected ? "selected" : null },
      el("td", {}, guest.name),
      state,
      ...cells.map((text) => el("td", { class: "n" }, text)),
      el("td", {}, rollout),
    );
  });
  $("guests").tBodies[0].replaceChildren(...rows);
}

function drawDetail(now) {
  const guest = now.guests.find((g) => g.name === selected);
  $("detail").hidden = !guest;
  if (!guest) return;
  $("detail-title").textContent = `${guest.name}: last reconciles`;
  const r = guest.running;
  const error = guest.reason || (r && r.lastError && `${when(r.lastError.unixMs)} ${r.lastError.message}`);
  $("detail-error").textContent = error || "";
  $("detail-error").hidden = !error;
  const rows = (r ? r.recent : []).map((x) =>
    el(
      "tr",
      {},
      el("td", {}, when(x.endedUnixMs)),
      el("td", {}, x.key),
      el("td", { class: "result-" + x.result }, x.result),
      el("td", { class: "n" }, seconds(x.seconds)),
      el("td", { class: "message" }, x.message || ""),
    ),
  );
  $("recent").tBodies[0].replaceChildren(...rows);
}

function drawErrors(now) {
  const items = [];
  for (const guest of now.guests) {
    if (guest.reason) items.push({ at: now.unixMs, text: `${guest.name} (${guest.state}): ${guest.reason}` });
    for (const x of (guest.running && guest.running.recent) || []) {
      if (x.message) items.push({ at: x.endedUnixMs, text: `${guest.name} ${x.key} ${x.result}: ${x.message}` });
    }
  }
  items.sort((a, b) => b.at - a.at);
  const shown = items.slice(0, 20).map((x) => el("li", {}, el("span", { class: "muted" }, when(x.at) + " "), x.text));
  $("errors").replaceChildren(...(shown.length ? shown : [el("li", { class: "muted" }, "none")]));
}

/** A divergence as a diff: each field written differently as a − and a + line under the write
 *  it belongs to, then what else differed (a write one side made, Events, the outcome). */
function diffOf(divergence) {
  const block = el("div", { class: "diff" });
  let write = null;
  for (const c of divergence.changes || []) {
    if (c.write !== write) {
      write = c.write;
      block.append(el("div", { class: "at" }, `@@ ${write} @@`));
    }
    block.append(el("div", { class: "del" }, `- ${c.path}: ${c.live}`));
    block.append(el("div", { class: "add" }, `+ ${c.path}: ${c.candidate}`));
  }
  const fieldLines = (divergence.changes || []).map((c) => `${c.write}: ${c.path}: `);
  for (const line of divergence.diff || []) {
    if (!fieldLines.some((prefix) => line.startsWith(prefix))) block.append(el("div", {}, "  " + line));
  }
  return block;
}

function drawRollouts(now) {
  const blocks = [];
  for (const guest of now.guests) {
    const rollout = guest.running && guest.running.rollout;
    if (!rollout) continue;
    const live = rollout.live || {};
    const c = rollout.candidateCounts || {};
    const block = el(
      "div",
      { class: "rollout", "data-rollout": guest.name },
      el("h3", {}, `${guest.name}: ${rollout.mode} ${rollout.phase}`, rollout.reason ? ` (${rollout.reason})` : ""),
      el("p", { class: "muted" }, `candidate ${rollout.candidate} ${String(rollout.digest || "").slice(0, 19)}`),
      el(
        "p",
        {},
        `live: ${live.reconciles} reconciles, ${live.errors} errors, ${live.traps} traps · ` +
          `candidate: ${c.reconciles} reconciles, ${c.same} the same, ${c.diverged} diverged, ` +
          `${c.errors} errors, ${c.traps} traps, ${c.skipped} skipped`,
      ),
    );
    const divergences = rollout.divergences || [];
    if (divergences.length === 0) block.append(el("p", { class: "muted" }, "no divergence"));
    for (const d of divergences) {
      block.append(el("h4", {}, d.key), diffOf(d));
    }
    blocks.push(block);
  }
  $("rollouts").replaceChildren(...(blocks.length ? blocks : [el("p", { class: "muted" }, "none")]));
}

// ---------------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromAddress();
  $("guests").tBodies[0].addEventListener("click", (event) => {
    const row = event.target.closest("tr[data-guest]");
    if (!row) return;
    selected = row.dataset.guest === selected ? null : row.dataset.guest;
    if (latest) draw(before, latest);
  });
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    poll();
  });
  loop();
});
