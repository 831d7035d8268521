// The console of egress-proxy (docs/reference/control-plane.md, "Console"): signing in,
// the calls to the admin API and the event stream. The elements are view.js's.
//
// Every call is the admin API with `Authorization: Bearer TOKEN`. The token lives in
// one variable of this module, nowhere else: not in storage, a cookie or the URL, so
// reloading the page forgets it.
import {
  $, approvalItem, denialItem, enable, isSecret, note, sessionItem, setCount, setStatus,
  updateApproval,
} from "/ui/view.js";

const MAX_DENIALS = 200;
const SESSIONS_EVERY_MS = 2000;
const APPROVALS_EVERY_MS = 1000;
const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 15000;
const STREAM_STEADY_MS = 30000;

let token = null; // the admin token, only here
let run = null; // { abort: AbortController } while signed in: each sign-in its own
const approvals = new Map(); // id -> the approval's element
let approvalsBusy = false;

class Unauthorized extends Error {}

// Wait `ms`, or less if `signal` aborts first.
function sleep(ms, signal) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}

async function api(method, path, body, signal) {
  const headers = { Authorization: "Bearer " + token };
  const init = { method, headers, signal, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (resp.status === 401) throw new Unauthorized();
  return resp;
}

// The API's message in an error answer, or its status.
async function refusal(resp) {
  try {
    const body = await resp.json();
    if (body.error && body.error.message) return body.error.message;
  } catch (_) {
    // not JSON: the status says enough
  }
  return "HTTP " + resp.status;
}

// The JSON of a 2xx answer; anything else is an Error with the API's message.
async function json(resp) {
  if (resp.ok) return resp.json();
  throw new Error(await refusal(resp));
}

// --- Signing in and out -------------------------------------------------------------

function signOut(message) {
  token = null;
  if (run) run.abort.abort();
  run = null;
  $("console").hidden = true;
  $("signout").hidden = true;
  $("login").hidden = false;
  setStatus("signed out");
  note("login-error", message);
  $("token").focus();
}

async function signIn(event) {
  event.preventDefault();
  const input = $("token");
  const given = input.value.trim();
  input.value = "";
  if (!given) return;
  token = given;
  const mine = { abort: new AbortController() };
  if (run) run.abort.abort();
  run = mine;
  $("connect").disabled = true;
  setStatus("connecting");
  try {
    const body = await json(await api("GET", "/v1/sessions", undefined, mine.abort.signal));
    if (run !== mine) return;
    $("login").hidden = true;
    note("login-error", "");
    $("console").hidden = false;
    $("signout").hidden = false;
    $("denials-list").replaceChildren();
    setCount("denials", 0);
    approvals.clear();
    $("approvals-list").replaceChildren();
    note("approvals-done", "");
    setCount("approvals", 0);
    showSessions(body.sessions || []);
    loop(mine, SESSIONS_EVERY_MS, refreshSessions);
    loop(mine, APPROVALS_EVERY_MS, refreshApprovals);
    streamDenials(mine);
  } catch (e) {
    if (run !== mine) return;
    signOut(
      e instanceof Unauthorized
        ? "The proxy refused this token (401 unauthorized). Type the admin token again."
        : "Cannot reach the admin API: " + e.message,
    );
  } finally {
    $("connect").disabled = false;
  }
}

// Run `step` every `every` ms (after the previous one ends) while `mine` is signed in.
async function loop(mine, every, step) {
  while (run === mine) {
    await step(mine);
    await sleep(every, mine.abort.signal);
  }
}

// A failed call: 401 signs out; anything else is shown in the section's note.
function failed(mine, section, e) {
  if (run !== mine) return;
  if (e instanceof Unauthorized) {
    signOut("The proxy no longer accepts this token (401 unauthorized). Type it again.");
  } else {
    note(section + "-note", "Cannot reach the admin API (" + e.message + "); retrying.");
  }
}

// --- Denials: GET /v1/events?event=egress.denied,egress.flagged -----------------------

// The refusals, and the secrets a detector in report mode let through (`egress.flagged`,
// docs/reference/dlp.md): both are shown, these first.
const DENIALS_STREAM = "/v1/events?event=egress.denied,egress.flagged";

// An EventSource cannot send an Authorization header: the stream is fetch's body, split
// into blocks at blank lines, each block's `event:` and `data:` fields read.
async function streamDenials(mine) {
  let backoff = BACKOFF_FIRST_MS;
  while (run === mine) {
    let opened = 0;
    try {
      const resp = await api("GET", DENIALS_STREAM, undefined, mine.abort.signal);
      if (!resp.ok) await json(resp);
      opened = Date.now();
      setStatus("live");
      note("denials-note", "");
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let text = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text = (text + value).replace(/\r\n/g, "\n");
        let end;
        while ((end = text.indexOf("\n\n")) >= 0) {
          onBlock(mine, text.slice(0, end));
          text = text.slice(end + 2);
        }
      }
      throw new Error("the stream ended");
    } catch (e) {
      if (run !== mine) return;
      if (e instanceof Unauthorized) return failed(mine, "denials", e);
      // A stream that stayed open a while starts the backoff over; one that keeps
      // dropping at once waits longer each time.
      if (opened && Date.now() - opened > STREAM_STEADY_MS) backoff = BACKOFF_FIRST_MS;
      setStatus("reconnecting");
      const wait = Math.round(backoff / 100) / 10;
      note("denials-note", `The event stream was lost (${e.message}); reconnecting in ${wait}s.`);
    }
    await sleep(backoff, mine.abort.signal);
    backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
  }
}

// A line of the stream as the audit record it holds: an OCSF event (`--audit-format
// ocsf`, docs/reference/audit-log.md, "OCSF") read back into the fields a denial shows.
function asRecord(e) {
  if (e.class_uid === undefined) return e;
  const u = e.unmapped || {};
  const dst = e.dst_endpoint || {};
  const http = e.http_request || {};
  const dns = e.class_uid === 4003 ? "DNS" : "";
  return {
    ts: u.ts || new Date(e.time).toISOString(),
    event: u.event,
    session: ((e.actor || {}).session || {}).uid || null,
    method: http.http_method || u.method || dns,
    host: dst.hostname || "",
    port: dst.port ?? null,
    url: (http.url || e.url || {}).url_string,
    reason: e.status_detail || null,
    rule: (e.firewall_rule || {}).name || null,
    policy_level: u.policy_level || null,
    dlp: u.dlp || null,
    shared_hosting: !!u.shared_hosting,
    via: u.via,
  };
}

// One block of the stream: comments skipped, `data:` lines joined, the JSON record shown.
function onBlock(mine, block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const key = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (key === "event") name = value;
    else if (key === "data") data.push(value);
  }
  if (!data.length) return;
  let record;
  try {
    record = JSON.parse(data.join("\n"));
  } catch (_) {
    return;
  }
  if (name === "egress.denied" || name === "egress.flagged") {
    const list = $("denials-list");
    const denial = { ...asRecord(record), event: name };
    // Canaries and secrets found first (docs/reference/dlp.md), newest first; then the
    // other denials, newest first. The oldest of the others goes first when full.
    const item = denialItem(denial);
    if (isSecret(denial)) list.prepend(item);
    else list.insertBefore(item, list.querySelector(".denial:not(.secret)"));
    while (list.children.length > MAX_DENIALS) list.lastElementChild.remove();
    setCount("denials", list.children.length);
  }
  // A refusal may be a request now held for a reviewer: look without waiting the poll.
  refreshApprovals(mine);
}

// --- Sessions: GET /v1/sessions every 2 s ---------------------------------------------

async function refreshSessions(mine) {
  try {
    const body = await json(await api("GET", "/v1/sessions", undefined, mine.abort.signal));
    if (run !== mine) return;
    note("sessions-note", "");
    showSessions(body.sessions || []);
  } catch (e) {
    failed(mine, "sessions", e);
  }
}

function showSessions(sessions) {
  $("sessions-list").replaceChildren(...sessions.map(sessionItem));
  setCount("sessions", sessions.length);
}

// --- Approvals: GET /v1/approvals every second; POST /v1/approvals/{id} --------------

async function refreshApprovals(mine) {
  if (approvalsBusy || mine.noApprovals || run !== mine) return;
  approvalsBusy = true;
  try {
    const resp = await api("GET", "/v1/approvals", undefined, mine.abort.signal);
    if (resp.status === 404) {
      // A proxy without approvals: say so once, and stop asking.
      mine.noApprovals = true;
      note("approvals-note", "This proxy serves no approvals (GET /v1/approvals: 404).");
      return;
    }
    const body = await json(resp);
    if (run !== mine) return;
    note("approvals-note", "");
    showApprovals(mine, body.approvals || []);
  } catch (e) {
    failed(mine, "approvals", e);
  } finally {
    approvalsBusy = false;
  }
}

// Keyed by id, so that an element (and the button under the reviewer's finger) stays
// put while its approval waits.
function showApprovals(mine, list) {
  const seen = new Set();
  for (const a of list) {
    seen.add(a.id);
    const known = approvals.get(a.id);
    if (known) {
      updateApproval(known, a);
      continue;
    }
    const item = approvalItem(a, (decision) => decide(mine, a, item, decision));
    approvals.set(a.id, item);
    $("approvals-list").append(item);
  }
  for (const [id, item] of approvals) {
    if (!seen.has(id)) forget(id, item);
  }
  setCount("approvals", approvals.size);
}

function forget(id, item) {
  item.remove();
  approvals.delete(id);
  setCount("approvals", approvals.size);
}

const DONE = { "allow-once": "Allowed once", "allow-session": "Allowed for its session", deny: "Denied" };

async function decide(mine, a, item, decision) {
  enable(item, false);
  const target = `${a.host}:${a.port}`;
  let message;
  try {
    const path = "/v1/approvals/" + encodeURIComponent(a.id);
    const resp = await api("POST", path, { decision }, mine.abort.signal);
    let settled = resp.ok || resp.status === 404;
    if (resp.ok) message = `${DONE[decision]}: ${target}.`;
    else if (resp.status === 404) message = `${target} was already decided, or its wait ran out.`;
    else {
      // 409 refused_by_policy: decided, but the policy in force refused the requests.
      const body = await resp.json().catch(() => ({}));
      const error = body.error || {};
      if (error.type === "refused_by_policy") settled = true;
      message = `${target}: ${error.message || "HTTP " + resp.status}`;
    }
    if (settled) forget(a.id, item);
    else enable(item, true);
  } catch (e) {
    enable(item, true);
    return failed(mine, "approvals", e);
  }
  note("approvals-done", message);
  refreshApprovals(mine);
}

// A module runs once the document is parsed.
$("login-form").addEventListener("submit", signIn);
$("signout").addEventListener("click", () => signOut("Token forgotten."));
$("token").focus();
