// The console's view (docs/reference/control-plane.md, "Console"): the page's elements,
// built from what the admin API answers. All of it comes from the proxy and is
// attacker-influenced (host names, paths, labels): it goes into the page as text
// (createElement, textContent, setAttribute), never as markup. This module holds no
// token and makes no call; app.js does.

export const $ = (id) => document.getElementById(id);

// An element with a class, a text and attributes.
export function el(tag, cls, text, attrs) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

// "label value", the label muted.
function field(name, value, cls) {
  const wrap = el("span", "field " + (cls || ""));
  wrap.append(el("span", "label", name), el("span", "value", value));
  return wrap;
}

function badge(text, kind) {
  return el("span", "badge " + kind, text);
}

// A section's note (an error, a decision made): shown with `text`, hidden without.
export function note(id, text) {
  const n = $(id);
  n.textContent = text || "";
  n.hidden = !text;
}

// The header's state: "signed out", "connecting", "live" or "reconnecting".
export function setStatus(state) {
  const status = $("status");
  status.textContent = state;
  status.dataset.state = state;
}

// A section's count, and its "nothing here" line.
export function setCount(section, n) {
  $(section + "-count").textContent = String(n);
  $(section + "-empty").hidden = n > 0;
}

function clock(ts) {
  const d = new Date(ts);
  return isNaN(d) ? String(ts) : d.toLocaleTimeString([], { hour12: false });
}

// "12s", "3m 04s", "2h 05m": how far `ts` is from now.
export function span(ts) {
  const d = new Date(ts);
  if (isNaN(d)) return String(ts);
  let s = Math.max(0, Math.round(Math.abs(d - Date.now()) / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  s %= 60;
  const two = (n) => String(n).padStart(2, "0");
  return h ? `${h}h ${two(m)}m` : m ? `${m}m ${two(s)}s` : `${s}s`;
}

function bytes(n) {
  if (typeof n !== "number") return String(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

// Red for what the organization refuses, amber for a session's or a request's policy,
// white on red for a canary or secret found.
function reasonKind(reason) {
  if (isSecret({ reason })) return "secret";
  if (reason === "not_in_request_policy" || reason === "policy_widening") return "request";
  return "org";
}

// A refusal for a canary or a secret found in the request (docs/reference/dlp.md): the
// page shows these first.
export function isSecret(r) {
  return r.reason === "exfiltration_detected" || r.reason === "secret_detected";
}

// One denial (an `egress.denied` audit record, docs/reference/audit-log.md), or a secret
// a detector in report mode found and let through (`egress.flagged`): shown alike, with a
// "let through" badge.
export function denialItem(r) {
  const secret = isSecret(r);
  const flagged = r.event === "egress.flagged";
  const cls = "item denial" + (secret ? " secret" : "") + (flagged ? " flagged" : "");
  const item = el("li", cls, null, { "data-host": r.host || "" });
  const head = el("div", "head");
  const hasPort = r.port !== null && r.port !== undefined;
  head.append(el("span", "target", hasPort ? `${r.host}:${r.port}` : r.host));
  head.append(badge(r.reason || "denied", "reason " + reasonKind(r.reason)));
  if (flagged) head.append(badge("let through", "flagged"));
  if (r.shared_hosting) head.append(badge("shared hosting", "shared"));
  head.append(el("time", "when", clock(r.ts), { datetime: r.ts || "" }));
  const meta = el("div", "meta");
  // Which canary or detector, where, how encoded: the record never holds the value.
  const dlp = r.dlp && typeof r.dlp === "object" ? r.dlp : null;
  if (dlp) {
    meta.append(field("found", `${dlp.id} (${dlp.kind})`));
    meta.append(field("in", dlp.found_in));
    meta.append(field("encoding", dlp.encoding));
  }
  if (r.method) meta.append(field("method", r.method));
  meta.append(field("rule", r.rule || "none"));
  meta.append(field("level", r.policy_level || "none"));
  meta.append(field("session", r.session || "no session", "id"));
  if (r.via && r.via !== "proxy") meta.append(field("via", r.via));
  if (r.url) meta.append(field("url", r.url, "url"));
  item.append(head, meta);
  return item;
}

// A request policy in a few words: its first allowed_domains.
function policySummary(p) {
  if (!p || typeof p !== "object") return "none";
  const domains = Array.isArray(p.allowed_domains) ? p.allowed_domains : null;
  if (!domains) return String(p.type || "policy");
  if (!domains.length) return "nothing allowed";
  const shown = domains.slice(0, 3).map(String).join(", ");
  return domains.length > 3 ? `${shown} +${domains.length - 3} more` : shown;
}

// One session of `GET /v1/sessions`: what it sent upstream, against its budget if it
// has one (`network_policy.max_upload_bytes`).
export function sessionItem(s) {
  const item = el("li", "item session", null, { "data-id": s.id });
  const head = el("div", "head");
  head.append(el("span", "target id", s.id));
  if (s.label) head.append(badge(s.label, "label"));
  const meta = el("div", "meta");
  meta.append(field("allows", policySummary(s.network_policy), "policy"));
  meta.append(field("open tunnels", s.open_tunnels));
  if (s.on_deny === "ask") meta.append(field("on deny", `asks (${s.ask_timeout_seconds}s)`));
  meta.append(field("expires", `in ${span(s.expires_at)} (${clock(s.expires_at)})`));
  if (typeof s.uploaded_bytes === "number") {
    const policy = s.network_policy || {};
    meta.append(budget(s.uploaded_bytes, policy.max_upload_bytes));
  }
  item.append(head, meta);
  return item;
}

function budget(used, max) {
  const wrap = el("span", "field budget");
  wrap.append(el("span", "label", "budget"));
  const hasMax = typeof max === "number" && max > 0;
  wrap.append(el("span", "value", hasMax ? `${bytes(used)} of ${bytes(max)}` : `${bytes(used)} used`));
  if (hasMax) {
    const bar = el("progress", null, null, { max, value: Math.min(used, max) });
    bar.setAttribute("aria-label", "upload budget used");
    wrap.append(bar);
  }
  return wrap;
}

// One pending approval of `GET /v1/approvals`, with a button per decision it can take
// (no "allow for session" without a session); `decide(decision)` on a click.
export function approvalItem(a, decide) {
  const item = el("li", "item approval", null, { "data-id": a.id, "data-host": a.host || "" });
  const head = el("div", "head");
  head.append(el("span", "target", `${a.host}:${a.port}`));
  head.append(badge(a.method || "?", "method"));
  head.append(el("span", "when waited"));
  const meta = el("div", "meta");
  if (a.path) meta.append(field("path", a.path, "url"));
  meta.append(field("session", a.session || "no session", "id"));
  meta.append(field("would add", a.entry));
  const held = field("held", "");
  held.lastElementChild.classList.add("waiting");
  meta.append(held);
  // Every request a decision would release, not only the first.
  const requests = el("ol", "held-requests", null, { "aria-label": "held requests" });
  const actions = el("div", "actions");
  const choices = [["allow-once", "Allow once", "allow"]];
  if (a.session !== null && a.session !== undefined) {
    choices.push(["allow-session", "Allow for session", "allow"]);
  }
  choices.push(["deny", "Deny", "deny"]);
  for (const [decision, label, kind] of choices) {
    const b = el("button", kind, label, { type: "button", "data-decision": decision });
    b.addEventListener("click", () => decide(decision));
    actions.append(b);
  }
  item.append(head, meta, requests, actions);
  updateApproval(item, a);
  return item;
}

// What moves while an approval waits: how long, how many requests, and each of them
// (method, path, how long it has waited).
export function updateApproval(item, a) {
  item.querySelector(".waited").textContent = "waiting " + span(a.since);
  item.querySelector(".waiting").textContent = a.waiting > 1 ? `${a.waiting} requests` : "1 request";
  const rows = (a.requests || []).map((r) => {
    const row = el("li", "held-request", null, { "data-method": r.method || "" });
    row.append(el("span", "held-method", r.method || "?"));
    row.append(el("span", "url", r.path === null || r.path === undefined ? "(tunnel)" : r.path));
    row.append(el("span", "when", "waiting " + span(r.since)));
    return row;
  });
  item.querySelector(".held-requests").replaceChildren(...rows);
}

export function enable(item, on) {
  for (const b of item.querySelectorAll("button")) b.disabled = !on;
}
