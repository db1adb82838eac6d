/**
 * The status page's one HTML document (docs/local.md, "The status page"): inline style and
 * script, no external assets, so it works offline and from any checkout. Its script reads
 * `/status.json` every two seconds and draws the panels from it with text nodes only (a table
 * name is never read as HTML).
 */
export const STATUS_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>cdc local status</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .2em; }
h2 { font-size: 1.05em; margin: 1.2em 0 .3em; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: 2px 10px 2px 0; vertical-align: top; }
th { font-weight: 600; border-bottom: 1px solid #ccc; }
.muted { color: #666; }
.bad { color: #b00020; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: 2em; }
svg { background: #fafafa; border: 1px solid #ddd; }
#updated.stale { color: #b00020; }
#phase:not(:empty) { margin: .4em 0; padding: .3em .6em; background: #fff6d6; border: 1px solid #e6c65c; }
</style>
</head>
<body>
<h1 id="title">cdc local</h1>
<div id="updated" class="muted">waiting for the first status</div>
<div id="phase"></div>
<div id="where" class="muted"></div>
<div id="panels"></div>
<script>
"use strict";
var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
function el(tag, attrs, children) {
  var e = document.createElement(tag);
  for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
  (children || []).forEach(function (c) { e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
  return e;
}
function svgEl(tag, attrs) {
  var e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}
function ms(v) {
  if (v === null || v === undefined || !isFinite(v)) return "-";
  if (v < 1000) return Math.round(v) + " ms";
  if (v < 60000) return (v / 1000).toFixed(1) + " s";
  var s = Math.floor(v / 1000), m = Math.floor(s / 60), h = Math.floor(m / 60);
  if (h > 0) return h + "h" + String(m % 60).padStart(2, "0") + "m";
  return m + "m" + String(s % 60).padStart(2, "0") + "s";
}
function bytes(n) {
  if (n === null || n === undefined) return "-";
  if (n < 1024) return n + " B";
  if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1048576).toFixed(1) + " MiB";
}
function rate(n) { return n >= 100 ? n.toFixed(0) : n.toFixed(1); }
function grid(id, head, rows) {
  return el("table", { id: id }, [el("tr", {}, head.map(function (h) { return el("th", {}, [h]); }))].concat(rows.map(function (r) {
    return el("tr", {}, r.map(function (c) { return el("td", {}, [String(c)]); }));
  })));
}
function panel(id, title, body) { return el("section", { id: id }, [el("h2", {}, [title])].concat(body)); }
function chart(id, title, series, unit) {
  var w = 420, h = 140, pad = 4, all = [];
  series.forEach(function (s) { s.points.forEach(function (p) { if (p[1] !== null) all.push(p); }); });
  var svg = svgEl("svg", { width: w, height: h, role: "img", "aria-label": title });
  var legend = series.map(function (s, i) { return el("span", { style: "color:" + COLORS[i % COLORS.length] + ";margin-right:1em" }, [s.name]); });
  if (all.length > 1) {
    var t0 = Math.min.apply(null, all.map(function (p) { return p[0]; })), t1 = Math.max.apply(null, all.map(function (p) { return p[0]; }));
    var top = Math.max(1, Math.max.apply(null, all.map(function (p) { return p[1]; })));
    series.forEach(function (s, i) {
      var pts = s.points.filter(function (p) { return p[1] !== null; }).map(function (p) {
        return (pad + ((p[0] - t0) / Math.max(1, t1 - t0)) * (w - 2 * pad)).toFixed(1) + "," + (h - pad - (p[1] / top) * (h - 2 * pad)).toFixed(1);
      });
      svg.appendChild(svgEl("polyline", { points: pts.join(" "), fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 1.5 }));
    });
    legend.push(el("span", { class: "muted" }, ["top " + unit(top) + ", last " + ms(t1 - t0)]));
  } else legend.push(el("span", { class: "muted" }, ["no readings yet"]));
  return el("div", { id: id }, [el("div", {}, [title]), svg, el("div", {}, legend)]);
}
function render(body) {
  var s = body.status, hist = body.history;
  if (!s) return;
  document.getElementById("title").textContent = "cdc local \\u2014 source " + s.source + " \\u2014 up " + ms(s.now - s.startedAt);
  var where = document.getElementById("where");
  where.replaceChildren.apply(where, s.where.map(function (w) { return el("div", {}, [w]); }));
  var out = [];
  var c = s.capture;
  out.push(panel("capture", "capture", [el("div", {}, [
    c.state + ": " + c.transactions + " tx, " + c.records + " records (" + rate(c.recordsPerSecond) + "/s), acked " + (c.lastCommitLsn || "-") + ", slot retains " + bytes(c.slotRetainedBytes)
  ])].concat(c.error ? [el("div", { class: "bad" }, ["ERROR " + c.error])] : [])
    .concat(s.workload ? [el("div", {}, ["workload " + s.workload.transactions + " tx (" + rate(s.workload.transactionsPerSecond) + "/s)" + (s.workload.errors ? ", " + s.workload.errors + " errors" : "")])] : [])));
  out.push(panel("sinks", "sinks (end-to-end lag from the heartbeat)", [grid("sinks-table", ["sink", "lag now", "p50", "p99", "events/s", "dead letters"], s.sinks.map(function (k) {
    var stale = k.lagAt !== null && s.now - k.lagAt > 15000 ? " (stale " + ms(s.now - k.lagAt) + ")" : "";
    return [k.sink, k.lagMs === null ? "waiting for heartbeat" : ms(k.lagMs) + stale, ms(k.lagP50Ms), ms(k.lagP99Ms), rate(k.eventsPerSecond), k.deadLetters];
  }))].concat(s.sinks.filter(function (k) { return k.carriedLagMs != null; }).map(function (k) {
    return el("div", { class: "muted" }, [k.sink + ": heartbeats committed before this run started arrived with up to " + ms(k.carriedLagMs) + " lag (it includes the downtime); p50/p99 count this run's heartbeats only"]);
  }))));
  var names = s.sinks.map(function (k) { return k.sink; });
  out.push(panel("over-time", "over time", [el("div", { class: "charts" }, [
    chart("lag-chart", "end-to-end lag now per sink", names.map(function (n) { return { name: n, points: hist.map(function (p) { var k = p.sinks.find(function (x) { return x.sink === n; }); return [p.at, k ? k.lagMs : null]; }) }; }), ms),
    chart("rate-chart", "rates (per second)", [{ name: "captured records", points: hist.map(function (p) { return [p.at, p.captureRecordsPerSecond]; }) }].concat(names.map(function (n) {
      return { name: n + " events", points: hist.map(function (p) { var k = p.sinks.find(function (x) { return x.sink === n; }); return [p.at, k ? k.eventsPerSecond : null]; }) };
    })), rate)
  ])]));
  if (s.consumers.length) out.push(panel("pollers", "pollers", [grid("pollers-table", ["consumer", "records/s", "behind", "retries", "dead letters", "stalled"], s.consumers.map(function (p) {
    return [p.consumer, rate(p.recordsPerSecond), ms(p.behindMs), p.retries, p.deadLetters, p.stalledMs != null ? "STALLED for " + ms(p.stalledMs) + ", retrying without limit: " + (p.lastError || "") : ""];
  }))]));
  if (s.slots && s.slots.length) out.push(panel("slots", "slots (retained WAL, headroom)", [grid("slots-table", ["slot", "owner", "active", "wal_status", "confirmed", "retained", "headroom", "level"], s.slots.map(function (k) {
    return [k.slot, k.ours ? "capture" : "other", k.active ? "yes" : "no", k.walStatus || "-", k.confirmedLsn || "-", bytes(k.retainedBytes), bytes(k.headroomBytes), k.level];
  }))]));
  if (s.snapshots && s.snapshots.length) out.push(panel("snapshots", "snapshots", [grid("snapshots-table", ["table", "status", "rows", "rate", "ETA", "throttle", "note"], s.snapshots.map(function (x) {
    var pct = x.estimatedRows > 0 ? " (" + Math.min(100, (100 * x.rowsDone) / x.estimatedRows).toFixed(0) + "%)" : "";
    var eta = x.status === "running" ? (x.etaSeconds === null ? "unknown" : ms(x.etaSeconds * 1000)) : x.status === "done" ? "done" : "-";
    var note = x.error ? "ERROR " + x.error : x.status === "running" && x.sinceUpdateMs > 30000 ? "no progress for " + ms(x.sinceUpdateMs) : "";
    return [x.table, x.status, x.rowsDone + "/" + x.estimatedRows + pct, rate(x.rowsPerSecond) + " rows/s", eta, (body.throttle[x.table] || x.throttle) + (x.chunkSize ? " (chunk " + x.chunkSize + ")" : ""), note];
  }))]));
  var byState = {};
  s.tables.forEach(function (t) { (byState[t.state] = byState[t.state] || []).push(t); });
  var held = s.tables.filter(function (t) { return t.heldBy && t.heldBy.length; }).length;
  out.push(panel("tables", "tables by state", [el("div", { id: "table-states" }, [(Object.keys(byState).map(function (k) {
    return byState[k].length + " " + k;
  }).join(", ") || "none yet") + (held ? "; " + held + " held by a sink" : "")]), grid("tables-table", ["table", "state", "held by", "reason"], s.tables.map(function (t) {
    return [t.table, t.state, (t.heldBy || []).join(", "), [t.reason, t.capture === "poll" ? "capture poll: " + body.pollNote : null].filter(function (x) { return x; }).join("; ")];
  }))]));
  if (s.notCaptured && s.notCaptured.length) out.push(panel("not-captured", "not captured (capture rules)", [grid("not-captured-table", ["table", "verdict", "reason"], s.notCaptured.map(function (t) { return [t.table, t.verdict, t.reason]; }))]));
  out.push(panel("dead-letters", "dead letters", [el("div", { id: "dead-letter-count", class: s.deadLetters ? "bad" : "" }, [String(s.deadLetters)])]));
  if (s.problems.length) out.push(panel("problems", "recent problems (details in logs/handlers.log)", s.problems.map(function (p) { return el("div", {}, [ms(s.now - p.at) + " ago  " + p.text]); })));
  if (s.hint) out.push(el("p", { class: "muted" }, [s.hint]));
  var panels = document.getElementById("panels");
  panels.replaceChildren.apply(panels, out);
}
var lastOk = 0;
function refresh() {
  fetch("status.json", { cache: "no-store" }).then(function (r) {
    if (!r.ok) throw new Error("status.json answered " + r.status);
    return r.json();
  }).then(function (body) {
    render(body);
    document.getElementById("phase").textContent = body.phase || "";
    lastOk = Date.now();
    var u = document.getElementById("updated");
    var age = body.status ? lastOk - body.status.now : 0;
    u.className = age > 5000 ? "stale" : "muted";
    u.textContent = body.status ? "status of " + new Date(body.status.now).toLocaleTimeString() + (age > 5000 ? ", not updated for " + ms(age) : " (refreshed every 2 s)") : "waiting for the first status";
  }).catch(function (e) {
    var u = document.getElementById("updated");
    u.className = "stale";
    u.textContent = "cannot read the status (" + e.message + ")" + (lastOk ? "; last update " + new Date(lastOk).toLocaleTimeString() : "") + ": is cdc local still running?";
  });
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
`;
