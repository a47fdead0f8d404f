import { createHash } from 'node:crypto';

/**
 * The live page at GET / of the debug port: who is being limited, per domain and rule, refreshed
 * from /top/rules every REFRESH_MS, and below it the quota streams' budgets (RLQS) when there are
 * any. One self-contained document (no external script, style, font or image: clusters are often
 * air-gapped). Descriptor values, bucket ids and proxy names are the callers' own bytes, so the
 * script only ever puts them into the page as text (textContent), never as markup.
 */

const REFRESH_MS = 2_000;
/** Descriptors shown per rule; /top has them all. */
const ROWS_PER_RULE = 10;

const STYLE = `
  :root { --allowed: #3b8f4f; --denied: #c8402f; --near: #d89a1c; --line: #d8dde3; --muted: #5d6875; }
  body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d232a; background: #f6f7f9; }
  header { background: #1d232a; color: #fff; padding: 10px 20px; display: flex; gap: 24px; align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 17px; margin: 0; }
  header .status { color: #c5ccd4; }
  main { padding: 12px 20px 24px; }
  h2 { font-size: 15px; margin: 18px 0 8px; }
  .rule { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; margin: 0 0 12px; }
  .rule-head { display: flex; gap: 18px; align-items: center; flex-wrap: wrap; }
  .rule-name { font-weight: 600; font-family: ui-monospace, Menlo, Consolas, monospace; }
  .limit, .share { color: var(--muted); }
  .share b { color: var(--denied); }
  svg.chart { display: block; }
  table { border-collapse: collapse; width: 100%; margin-top: 8px; }
  th, td { text-align: left; padding: 3px 8px; border-top: 1px solid var(--line); }
  th { color: var(--muted); font-weight: 500; }
  td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
  td.descriptor, .rule-head .descriptor { font-family: ui-monospace, Menlo, Consolas, monospace; word-break: break-all; }
  td.denied { color: var(--denied); font-weight: 600; }
  td.descriptor .override { font-family: system-ui, sans-serif; color: #6a3fb0; font-weight: 600; margin-left: 6px; }
  .legend span { margin-right: 12px; }
  .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: -1px; }
  .legend i.allowed { background: var(--allowed); }
  .legend i.denied { background: var(--denied); }
  .legend i.near { background: var(--near); }
  .empty, footer { color: var(--muted); }
  .more { margin: 6px 8px 0; }
  footer { padding: 0 20px 20px; }
  #rlqs, #regions { padding: 0 20px 12px; }
  footer a { color: inherit; margin-right: 14px; }
`;

const SCRIPT = `
"use strict";
const REFRESH_MS = ${REFRESH_MS};
const ROWS_PER_RULE = ${ROWS_PER_RULE};
const SVG = "http://www.w3.org/2000/svg";
const ALLOWED = "#3b8f4f", DENIED = "#c8402f", NEAR = "#d89a1c";

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function unitText(limit) {
  const n = limit.unit_multiplier;
  return n === 1 ? limit.unit : n + " " + limit.unit + "s";
}

function percent(part, whole) {
  return whole === 0 ? "0%" : (100 * part / whole).toFixed(1) + "%";
}

/** Stacked bars, one per step: allowed below, denied above; near-limit as a mark on the allowed bar. */
function chart(steps) {
  const n = steps.allowed.length;
  const width = 240, height = 44, bar = width / n;
  let max = 1;
  for (let i = 0; i < n; i++) max = Math.max(max, steps.allowed[i] + steps.denied[i]);
  const svg = svgEl("svg", { class: "chart", width, height, viewBox: "0 0 " + width + " " + height, role: "img" });
  svg.appendChild(svgEl("rect", { x: 0, y: 0, width, height, fill: "#f2f4f7" }));
  for (let i = 0; i < n; i++) {
    const a = steps.allowed[i] * height / max, d = steps.denied[i] * height / max, near = steps.near_limit[i] * height / max;
    const x = i * bar;
    if (a > 0) svg.appendChild(svgEl("rect", { x, y: height - a, width: Math.max(bar - 0.6, 0.6), height: a, fill: ALLOWED }));
    if (near > 0) svg.appendChild(svgEl("rect", { x, y: height - near, width: Math.max(bar - 0.6, 0.6), height: near, fill: NEAR }));
    if (d > 0) svg.appendChild(svgEl("rect", { x, y: height - a - d, width: Math.max(bar - 0.6, 0.6), height: d, fill: DENIED }));
  }
  const title = svgEl("title", {});
  title.textContent = "decisions per " + steps.step_s + " s over the window";
  svg.appendChild(title);
  return svg;
}

/** "exact", or how much the counts may be above the truth (a descriptor not kept all along in a full summary). */
function errorText(error) {
  const parts = [];
  if (error.denied > 0) parts.push(error.denied + " denied");
  if (error.allowed > 0) parts.push(error.allowed + " allowed");
  return parts.length === 0 ? "exact" : parts.join(", ");
}

/** A count, or the range its true value lies in when it may be over (count - error to count). */
function countText(count, error) {
  return error > 0 ? Math.max(0, count - error) + "–" + count : String(count);
}

function descriptorText(descriptor) {
  return descriptor.map(([k, v]) => k + "=" + v).join(", ");
}

/** A runtime override's limit, as its row's mark says it. */
function overrideText(o) {
  return " override: " + (o.unlimited ? "unlimited" : o.requests_per_unit + " per " + unitText(o));
}

function ruleCard(r) {
  const card = el("div", { class: "rule", "data-domain": r.domain, "data-rule": r.rule });
  const head = el("div", { class: "rule-head" });
  head.appendChild(el("span", { class: "rule-name" }, r.rule));
  const l = r.limit;
  const name = l.name ? " (" + l.name + ")" : "";
  head.appendChild(el("span", { class: "limit" }, l.requests_per_unit + " per " + unitText(l) + ", " + l.algorithm + (l.shadow_mode ? ", shadow mode" : "") + name));
  const share = el("span", { class: "share" });
  share.appendChild(el("b", { class: "denied-share" }, percent(r.denied, r.allowed + r.denied)));
  share.appendChild(document.createTextNode(" denied (" + r.denied + " of " + (r.allowed + r.denied) + "), " + r.near_limit + " near limit"));
  head.appendChild(share);
  head.appendChild(chart(r.steps));
  card.appendChild(head);
  const table = el("table");
  const top = el("tr");
  top.appendChild(el("th", {}, "descriptor"));
  for (const h of ["denied", "allowed", "near limit", "may be over by"]) top.appendChild(el("th", { class: "n" }, h));
  table.appendChild(el("thead")).appendChild(top);
  const body = table.appendChild(el("tbody"));
  for (const e of r.entries.slice(0, ROWS_PER_RULE)) {
    const row = el("tr");
    const cell = row.appendChild(el("td", { class: "descriptor" }, descriptorText(e.descriptor)));
    if (e.override) cell.appendChild(el("span", { class: "override", title: "runtime override, version " + e.override.version }, overrideText(e.override)));
    row.appendChild(el("td", { class: "n denied" }, countText(e.denied, e.error.denied)));
    row.appendChild(el("td", { class: "n allowed" }, countText(e.allowed, e.error.allowed)));
    row.appendChild(el("td", { class: "n near" }, countText(e.near_limit, e.error.allowed)));
    row.appendChild(el("td", { class: "n error" }, errorText(e.error)));
    body.appendChild(row);
  }
  card.appendChild(table);
  const more = r.entries.length - ROWS_PER_RULE;
  if (more > 0) card.appendChild(el("p", { class: "empty more" }, more + " more in /top?domain=" + r.domain + "&limit=1000"));
  return card;
}

function rate(n) {
  return n === null ? "not measured yet" : n.toFixed(1) + "/s";
}

function assignmentText(a) {
  if (a === null) return "none sent yet";
  if (a.kind === "token_bucket") return "token bucket: " + a.tokens_per_fill + " per " + a.fill_interval_s + " s, max " + a.max_tokens;
  return a.kind === "deny_all" ? "DENY_ALL" : "ALLOW_ALL";
}

/** One table per budget: every proxy dividing a rule's limit, with what it asks and what it is given. */
function budgetCard(b) {
  const card = el("div", { class: "rule rlqs-budget", "data-domain": b.domain, "data-rule": b.rule });
  const head = el("div", { class: "rule-head" });
  head.appendChild(el("span", { class: "rule-name" }, b.domain + " / " + b.rule));
  head.appendChild(el("span", { class: "descriptor" }, descriptorText(b.descriptor)));
  head.appendChild(el("span", { class: "limit" }, b.limit + " per " + b.window_s + " s" + (b.shadow_mode ? ", shadow mode" : "")));
  head.appendChild(el("span", { class: "share" }, b.used + " used in the window" + (b.overshoot > 0 ? ", " + b.overshoot + " over the limit" : "")));
  card.appendChild(head);
  const table = el("table");
  const top = el("tr");
  for (const h of ["proxy", "bucket", "demand", "assigned share", "assignment", "last report"]) top.appendChild(el("th", {}, h));
  table.appendChild(el("thead")).appendChild(top);
  const body = table.appendChild(el("tbody"));
  for (const p of b.proxies) {
    const row = el("tr");
    row.appendChild(el("td", { class: "descriptor proxy" }, p.local ? p.proxy : p.proxy + " (another replica)"));
    row.appendChild(el("td", { class: "descriptor" }, p.bucket === null ? "" : descriptorText(p.bucket)));
    row.appendChild(el("td", { class: "n" }, rate(p.demand)));
    row.appendChild(el("td", { class: "n" }, p.share.toFixed(1) + "/s"));
    row.appendChild(el("td", {}, p.local ? assignmentText(p.assignment) : ""));
    row.appendChild(el("td", { class: "n" }, p.report_age_s === null ? "" : p.report_age_s.toFixed(1) + " s ago"));
    body.appendChild(row);
  }
  card.appendChild(table);
  if (b.more_proxies > 0) card.appendChild(el("p", { class: "empty more" }, b.more_proxies + " more proxies in /rlqs"));
  return card;
}

/** The quota streams' budgets; the section is hidden while there is none. */
function renderRlqs(budgets) {
  const section = document.getElementById("rlqs");
  section.hidden = !budgets || budgets.length === 0;
  if (section.hidden) {
    section.replaceChildren();
    return;
  }
  const next = document.createDocumentFragment();
  next.appendChild(el("h2", {}, "Quota streams (RLQS)"));
  for (const b of budgets) next.appendChild(budgetCard(b));
  section.replaceChildren(next);
}

/** One table per global limit: this region's part and every region's demand and state. */
function regionCard(p) {
  const card = el("div", { class: "rule region-part", "data-domain": p.domain, "data-rule": p.rule });
  const head = el("div", { class: "rule-head" });
  head.appendChild(el("span", { class: "rule-name" }, p.domain + " / " + p.rule));
  head.appendChild(el("span", { class: "descriptor" }, p.counter));
  head.appendChild(el("span", { class: "limit" }, p.limit + " per " + p.window_s + " s across regions"));
  head.appendChild(el("span", { class: "share" }, "this region: " + p.part + " per window" + (p.cut_off ? ", CUT OFF (fallback)" : "") + ", synced " + (p.sync_age_s === null ? "never" : p.sync_age_s.toFixed(1) + " s ago")));
  card.appendChild(head);
  const table = el("table");
  const top = el("tr");
  for (const h of ["region", "demand", "members", "state"]) top.appendChild(el("th", {}, h));
  table.appendChild(el("thead")).appendChild(top);
  const body = table.appendChild(el("tbody"));
  for (const r of p.regions) {
    const row = el("tr");
    row.appendChild(el("td", { class: "descriptor" }, r.region));
    row.appendChild(el("td", { class: "n" }, rate(r.demand)));
    row.appendChild(el("td", { class: "n" }, String(r.members)));
    row.appendChild(el("td", {}, r.state));
    body.appendChild(row);
  }
  card.appendChild(table);
  return card;
}

/** The global limits' parts; the section is hidden while there is none. */
function renderRegions(parts) {
  const section = document.getElementById("regions");
  section.hidden = !parts || parts.length === 0;
  if (section.hidden) {
    section.replaceChildren();
    return;
  }
  const next = document.createDocumentFragment();
  next.appendChild(el("h2", {}, "Global limits (regions)"));
  for (const p of parts) next.appendChild(regionCard(p));
  section.replaceChildren(next);
}

function render(view) {
  const main = document.getElementById("domains");
  const domains = new Map();
  for (const r of view.rules) {
    if (!domains.has(r.domain)) domains.set(r.domain, []);
    domains.get(r.domain).push(r);
  }
  const next = document.createDocumentFragment();
  if (domains.size === 0) next.appendChild(el("p", { class: "empty" }, "No decisions in the last " + view.window_s + " s."));
  for (const [domain, rules] of domains) {
    const section = el("section", { class: "domain", "data-domain": domain });
    section.appendChild(el("h2", {}, "domain " + domain));
    for (const r of rules) section.appendChild(ruleCard(r));
    next.appendChild(section);
  }
  main.replaceChildren(next);
  renderRlqs(view.rlqs);
  renderRegions(view.regions);
  const replicas = view.replicas === 1 ? "1 replica" : view.replicas + " replicas";
  document.getElementById("status").textContent =
    "last " + view.window_s + " s, " + replicas + ", updated " + new Date(view.at_ms).toLocaleTimeString();
  document.body.dataset.updated = String(view.at_ms);
}

async function refresh() {
  try {
    const reply = await fetch("top/rules", { cache: "no-store" });
    if (!reply.ok) throw new Error("HTTP " + reply.status);
    render(await reply.json());
  } catch (err) {
    document.getElementById("status").textContent = "cannot refresh: " + err.message;
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}
refresh();
`;

/** The page. */
export const TOP_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>slidegate: who is being limited</title>
<style>${STYLE}</style>
</head>
<body>
<header>
  <h1>slidegate: who is being limited</h1>
  <span class="status" id="status">loading…</span>
  <span class="legend status"><span><i class="allowed"></i>allowed</span><span><i class="denied"></i>denied</span><span><i class="near"></i>near limit</span></span>
</header>
<main id="domains"><p class="empty">Waiting for the first view…</p></main>
<section id="rlqs" hidden></section>
<section id="regions" hidden></section>
<footer>
  <a href="/top">/top (JSON)</a><a href="/top/rules">/top/rules (JSON)</a><a href="/rlconfig">/rlconfig</a><a href="/rlqs">/rlqs</a><a href="/regions">/regions</a><a href="/metrics">/metrics</a>
</footer>
<script>${SCRIPT}</script>
</body>
</html>
`;

const sha256 = (text: string): string => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/** The page's Content-Security-Policy: its own style and script (by hash) and requests to this origin, nothing else. */
export const TOP_PAGE_CSP = `default-src 'none'; style-src ${sha256(STYLE)}; script-src ${sha256(SCRIPT)}; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`;
