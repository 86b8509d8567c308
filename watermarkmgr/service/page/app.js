// The live page of a kafkastreams instance or of cmd/watermarkmgr: reads
// server-sent "state" events from /events (PageState, see
// watermarkmgr/service/page.go) and redraws. No library.
"use strict";

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;","'":"&#39;"}[c]));
// recent are the states of the last RATE_WINDOW ms, oldest first: rates per
// second are over them (one commit can hold 10 000 records, so two states
// a quarter of a second apart often show none).
let recent = [];
const RATE_WINDOW = 5000;
// opened are the stages whose task table the reader opened: a redraw keeps
// them open. "#tasks" in the address opens every one.
const opened = new Set();
let openAll = location.hash === "#tasks";
document.addEventListener("toggle", (e) => {
  const card = e.target.closest && e.target.closest(".stage");
  if (!card) return;
  if (e.target.open) opened.add(card.dataset.stage); else opened.delete(card.dataset.stage);
}, true);

function dur(ms) {
  if (ms === null || ms === undefined) return "–";
  const neg = ms < 0; ms = Math.abs(ms);
  let s;
  if (ms < 1000) s = ms + " ms";
  else if (ms < 60e3) s = (ms / 1000).toFixed(1) + " s";
  else if (ms < 3600e3) s = Math.floor(ms / 60e3) + " min " + Math.floor(ms % 60e3 / 1000) + " s";
  else if (ms < 172800e3) s = Math.floor(ms / 3600e3) + " h " + Math.floor(ms % 3600e3 / 60e3) + " min";
  else s = Math.floor(ms / 86400e3) + " days";
  return (neg ? "-" : "") + s;
}

function state(st) {
  if (!st.watermark) return "noreport";
  if (st.explanation.cause === "done") return "done";
  if (st.explanation.stuck) return "stuck";
  if (st.watermark.held || st.watermark.state === "not started") return "held";
  return "moving";
}

// counts are a stage's counts: this instance's share on an instance's
// page, the application's (every instance, from its metrics topic) on
// cmd/watermarkmgr's.
const counts = (st) => st.local || st.app;

function rate(name, field, st) {
  const c = counts(st);
  if (recent.length === 0 || !c) return null;
  const old = recent[0];
  const p = old.stages.find((s) => s.info.name === name);
  const pc = p && counts(p);
  if (!pc) return null;
  const dt = (cur.nowMs - old.nowMs) / 1000;
  if (dt < 0.9) return null;
  return Math.max(0, (c[field] - pc[field]) / dt);
}
let cur = null;

function plot(st, nowMs, spanMs) {
  const W = 300, H = 90, pad = 4, padY = 16; // padY keeps the line off the labels
  const pts = (st.history || []).filter((p) => p[1] !== null);
  if (pts.length === 0) return `<svg viewBox="0 0 ${W} ${H}"><text x="8" y="48" font-size="11" fill="#889">no watermark between the ends of time yet</text></svg>`;
  let t0 = Math.max(nowMs - spanMs, st.history[0][0]);
  if (nowMs - t0 < 1000) t0 = nowMs - 1000;
  let lo = Math.min(...pts.map((p) => p[1])), hi = Math.max(...pts.map((p) => p[1]));
  if (hi === lo) { hi += 1000; lo -= 1000; }
  const x = (t) => pad + (Math.max(t, t0) - t0) / (nowMs - t0) * (W - 2 * pad);
  const y = (w) => H - padY - (w - lo) / (hi - lo) * (H - 2 * padY);
  let d = "", last = null;
  for (const p of st.history) {
    if (p[1] === null) {
      // The watermark left the plottable range (done, or held again): its
      // last value lasted until then.
      if (last !== null) d += `H${x(p[0]).toFixed(1)}`;
      last = null;
      continue;
    }
    if (last === null) d += `M${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`;
    else d += `H${x(p[0]).toFixed(1)}V${y(p[1]).toFixed(1)}`;
    last = p;
  }
  if (last !== null && st.history[st.history.length - 1][1] !== null) d += `H${x(nowMs).toFixed(1)}`;
  const iso = (ms) => new Date(ms).toISOString().replace(".000Z", "Z").replace("T", " ");
  return `<svg viewBox="0 0 ${W} ${H}"><path d="${d}" fill="none" stroke="#5b6ee1" stroke-width="1.6"/>` +
    `<text x="${W - 4}" y="12" text-anchor="end" font-size="10" fill="#889">${iso(hi)}</text>` +
    `<text x="${W - 4}" y="${H - 6}" text-anchor="end" font-size="10" fill="#889">${iso(lo)}</text></svg>`;
}

// wmWords says a watermark at an end of Beam's time range in words
// (mtime.MinTimestamp and MaxTimestamp: ±(2^63-1)/1000 ms), else its ISO time.
function wmWords(ms, iso) {
  if (ms <= -9223372036854775) return "start of time";
  if (ms >= 9223372036854775) return "end of time";
  return iso;
}

function partitions(st) {
  const w = st.watermark; if (!w) return "";
  const tasks = {};
  for (const t of (st.local && st.local.tasks) || []) tasks[t.partition] = t;
  const keys = Object.keys(w.partitions).sort((a, b) => +a.split(":").pop() - +b.split(":").pop());
  let rows = "";
  for (const k of keys) {
    const p = w.partitions[k], n = +k.split(":").pop(), t = tasks[n];
    const owner = t ? "this instance" : (p.owner ? p.owner : "–");
    const lag = t && t.lagRecords >= 0 ? t.lagRecords : "–";
    const last = p.lastReportMs ? dur(cur.nowMs - p.lastReportMs) + " ago" : "never";
    const min = p.minimum && w.state !== "end of time";
    rows += `<tr class="${min ? "min" : ""}" data-partition="${n}"><td>${n}${min ? " ◀ min" : ""}</td><td>${p.reported ? esc(wmWords(p.watermarkMs, p.watermarkIso)) : "not reported"}</td>` +
      `<td>${p.idle ? "idle" : ""}${p.alignmentHeld ? " paused (alignment)" : ""}</td><td>${esc(owner)}</td><td>${last}</td><td>${lag}</td>` +
      `<td>${p.topic ? esc(p.topic) + (p.lastEventTimeIso ? " @ " + esc(p.lastEventTimeIso) : " (no record yet)") : ""}</td></tr>`;
  }
  return `<table class="parts"><tr><th>task</th><th>watermark</th><th>state</th><th>owner</th><th>last report</th><th>lag (records)</th><th>source</th></tr>${rows}</table>`;
}

function render(s) {
  cur = s;
  if (openAll) {
    for (const st of s.stages) opened.add(st.info.name);
    openAll = false;
  }
  $("app").textContent = s.application ? "· " + s.application : "";
  $("clock").textContent = (s.instance ? "instance " + s.instance + " · " : "") + new Date(s.nowMs).toISOString().replace(/\.\d+Z$/, "Z");
  $("graph-box").innerHTML = s.graphSvg;
  const stuck = s.stages.filter((st) => st.explanation.stuck);
  $("stuck").hidden = stuck.length === 0;
  $("stuck-list").innerHTML = stuck.map((st) => `<li data-stage="${esc(st.info.name)}"><b>${esc(st.info.name)}</b>: <span class="chain">${esc(st.explanation.text)}</span></li>`).join("");
  let html = "";
  for (const st of s.stages) {
    const w = st.watermark, cls = state(st), l = counts(st);
    const figs = [];
    if (w) {
      figs.push(`watermark <b class="wm">${esc(w.state === "running" ? w.globalIso : w.state)}</b>`);
      figs.push(`behind wall clock <b>${dur(w.lagMs)}</b>`);
      figs.push(`behind newest event <b>${dur(st.behindNewestMs)}</b>`);
    }
    if (l) {
      const ri = rate(st.info.name, "recordsIn", st), eo = rate(st.info.name, "elementsOut", st);
      figs.push(`records in <b>${l.recordsIn}</b>${ri === null ? "" : " (" + ri.toFixed(0) + "/s)"}`);
      figs.push(`elements out <b>${l.elementsOut}</b>${eo === null ? "" : " (" + eo.toFixed(0) + "/s)"}`);
      figs.push(`commits <b>${l.commits}</b>`, `aborts <b>${l.aborts}</b>`);
      if (l.deadLetters > 0) figs.push(`dead letters <b>${l.deadLetters}</b> (--error_policy=dead_letter)`);
      if (l.lateDropped >= 0) figs.push(`late dropped <b>${l.lateDropped}</b>`);
      if (l.windowsHeld >= 0) figs.push(`state held <b>${l.windowsHeld} ${l.windowsHeld === 1 ? "pane" : "panes"}</b> (key, window)`);
      if (l.timersPending >= 0) figs.push(`state held <b>${l.timersPending} ${l.timersPending === 1 ? "timer" : "timers"}</b>`);
      if (st.local) {
        const here = (l.tasks || []).map((t) => t.partition);
        figs.push(`assigned here <b>${here.length === 0 ? "no task" : (here.length === 1 ? "task " : "tasks ") + here.join(", ")}</b>`);
      } else {
        figs.push(`counted over <b>${plural((l.instances || []).length, "instance")}</b>`);
      }
    } else if (!s.instance) {
      figs.push(`counts: no committed transaction counted yet`);
    }
    const tr = st.info.transforms || [];
    html += `<div class="stage" data-stage="${esc(st.info.name)}">` +
      `<h3>${esc(st.info.name)}<span class="badge ${cls}">${cls === "noreport" ? "no report yet" : cls}</span> <small>${esc(st.info.head || "")}${st.info.inputTopic ? " · reads " + esc(st.info.inputTopic) : ""}</small></h3>` +
      `<div class="plot">${plot(st, s.nowMs, 600e3)}<div class="cap">${plotCaption(st, s.nowMs)}</div></div>` +
      `<div class="figs">${figs.map((f) => "<span>" + f + "</span>").join("")}</div>` +
      `<div class="why ${st.explanation.stuck ? "stuck" : ""}">${esc(st.explanation.text)}</div>` +
      `<details${opened.has(st.info.name) ? " open" : ""}><summary>${plural(w ? Object.keys(w.partitions).length : 0, "task")}${w && w.minimumPartition && cls !== "done" ? ", minimum: task " + esc(w.minimumPartition.split(":").pop()) : ""} · ${plural(tr.length, "fused transform")}</summary>${partitions(st)}` +
      `<p class="figs">${tr.map(esc).join(" → ") || "no SDK transforms"}</p></details></div>`;
  }
  $("stages").innerHTML = html;
  recent.push(s);
  while (recent.length > 1 && s.nowMs - recent[0].nowMs > RATE_WINDOW) recent.shift();
}

function plural(n, what) { return n + " " + what + (n === 1 ? "" : "s"); }

function plotCaption(st, nowMs) {
  const h = st.history || [];
  if (h.length === 0 || nowMs - h[0][0] >= 600e3) return "watermark over the last 10 minutes";
  return "watermark since " + new Date(h[0][0]).toISOString().slice(11, 19) + "Z (the first report seen)";
}

function connect() {
  const es = new EventSource("/events");
  es.addEventListener("state", (e) => {
    $("conn").textContent = "live"; $("conn").className = "conn";
    render(JSON.parse(e.data));
  });
  es.onerror = () => {
    $("conn").textContent = "disconnected: retrying"; $("conn").className = "conn off";
    // A refusal (503: the server's GET /events streams are all taken) closes
    // the EventSource for good; the browser retries only a lost connection.
    if (es.readyState === EventSource.CLOSED) setTimeout(connect, 5000);
  };
}
connect();
