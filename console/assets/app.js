// The support console (docs/console.md). One page that routes itself on
// its path, so that a deep link (/console/ns/1/players/42) can be pasted
// into a ticket. Every request is a call of coffer's public API with the
// agent's key, kept in this tab's sessionStorage only: the console has no
// power of its own. Page content is built with DOM nodes and textContent,
// never HTML strings, so no value from the ledger (a meta, a reason) can
// become markup.
"use strict";

const keyItem = "coffer.key", clientItem = "coffer.client";
const main = document.getElementById("main");

// h builds an element: h("td", {class: "num"}, "12").
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function say(text) { document.getElementById("status").textContent = text || ""; }

// ---- the API -----------------------------------------------------------

// ApiError is an API call's problem+json: code, status, detail.
class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || "HTTP " + status);
    this.status = status;
    this.code = problem.code || "internal";
  }
}

// call makes one API call with the session's key. A 401 ends the
// session: the key is no longer accepted.
async function call(method, path, body) {
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(keyItem) };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, { code: "unreachable", detail: "coffer did not answer (" + e.message + "); try again: a form applies at most once" });
  }
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new ApiError(res.status, data);
    if (res.status === 401 && path !== "/v1/client") endSession("Your session ended: coffer no longer accepts this key (" + err.message + "). Sign in again.");
    throw err;
  }
  return { status: res.status, data };
}

function q(params) {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") s.set(k, v);
  const t = s.toString();
  return t ? "?" + t : "";
}
const enc = encodeURIComponent;
const playerPath = (ns, p) => `/v1/namespaces/${enc(ns)}/players/${enc(p)}`;

// ---- the session -------------------------------------------------------

function client() { return JSON.parse(sessionStorage.getItem(clientItem) || "null"); }
function can(p) { const c = client(); return !!c && c.permissions.includes(p); }

function endSession(message) {
  sessionStorage.removeItem(keyItem);
  sessionStorage.removeItem(clientItem);
  go("/console/signin", message);
}

function who(emitter) {
  const c = client();
  const n = c && (c.clients || []).find((x) => x.emitter === emitter);
  return n ? n.name : emitter ? "emitter " + emitter : "coffer";
}

function showSession() {
  const c = client();
  document.getElementById("nav").hidden = !c;
  document.getElementById("signout").hidden = !c;
  document.getElementById("who").textContent = c ? `${c.name} · ${c.permissions.join(", ")}` : "";
}

// ---- routing -----------------------------------------------------------

function go(path, message) {
  history.pushState(null, "", path);
  route(message);
}

const routes = [
  [/^\/console\/signin$/, signInPage],
  [/^\/console\/?$/, findPage],
  [/^\/console\/ns\/(\d+)\/players\/(\d+)$/, playerPage],
  [/^\/console\/revenue$/, revenuePage],
  [/^\/console\/health$/, healthPage],
];

async function route(message) {
  say(message);
  showSession();
  const path = location.pathname;
  if (!client() && path !== "/console/signin") {
    sessionStorage.setItem("coffer.next", path + location.search);
    history.replaceState(null, "", "/console/signin");
    return route(message);
  }
  main.replaceChildren();
  for (const [re, page] of routes) {
    const m = path.match(re);
    if (m) {
      try {
        await page(...m.slice(1));
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) return;
        main.append(h("p", { class: "error", role: "alert" }, e.message));
      }
      const h1 = main.querySelector("h1");
      if (h1) document.title = h1.textContent + " · coffer console";
      // A new page starts at its top, header shown; focus moves to its
      // content without scrolling the header away.
      window.scrollTo(0, 0);
      main.focus({ preventScroll: true });
      return;
    }
  }
  main.append(h("h1", {}, "No such page"), h("p", {}, h("a", { href: "/console/", "data-nav": true }, "Find a player")));
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-nav]");
  if (a && !e.ctrlKey && !e.metaKey && !e.shiftKey && e.button === 0) {
    e.preventDefault();
    go(a.getAttribute("href"));
  }
});
window.addEventListener("popstate", () => route());
document.getElementById("signout").addEventListener("click", () => endSession("Signed out."));

// ---- forms -------------------------------------------------------------

let fieldSeq = 0;

// field is a labelled input with the place for its error beside it.
function field(label, input, hint) {
  const id = input.id || "f" + ++fieldSeq;
  input.id = id;
  const err = h("div", { class: "error", id: id + "-error" });
  input.setAttribute("aria-describedby", id + "-error");
  return h("div", { class: "field" }, h("label", { for: id }, label), input, hint ? h("span", { class: "muted" }, hint) : null, err);
}

function input(name, attrs) { return h("input", Object.assign({ name, autocomplete: "off" }, attrs)); }

function select(name, options, attrs) {
  return h("select", Object.assign({ name }, attrs), options.map((o) => (Array.isArray(o) ? h("option", { value: o[0] }, o[1]) : h("option", { value: o }, o))));
}

function clearErrors(form) {
  form.querySelectorAll(".error").forEach((e) => (e.textContent = ""));
  form.querySelectorAll("[aria-invalid]").forEach((e) => e.removeAttribute("aria-invalid"));
}

// showError puts an API error next to the field it names (its detail
// starts with the field: "ops[0].amount: …", "reason: …"), or under the
// form's button when it names none.
function showError(form, err, byCode) {
  const named = (err.message.match(/^(?:[a-z_]+\[\d+\]\.)?([a-z_]+)(?:\.[a-z_]+)?:/) || [])[1];
  const name = (byCode && byCode[err.code]) || named;
  const el = name && form.querySelector(`[name="${name}"]`);
  const text = `${err.message} (${err.code})`;
  if (el) {
    el.setAttribute("aria-invalid", "true");
    document.getElementById(el.id + "-error").textContent = text;
    el.focus();
  } else {
    form.querySelector(".form-error").textContent = text;
  }
}

function formError() { return h("div", { class: "error form-error", role: "alert" }); }

// newKey is a fresh idempotency key: one per correction form, so that a
// double click or a retry of that form applies it once.
function newKey() {
  const b = crypto.getRandomValues(new Uint8Array(12));
  return "console-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

const fmt = (n) => (n === undefined || n === null ? "" : Number(n).toLocaleString("en-US"));
const time = (t) => (t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "");
const localToISO = (v) => (v ? new Date(v).toISOString() : "");

function table(headers, rows, caption) {
  return h("div", { class: "scroll" }, h("table", {}, caption ? h("caption", { class: "muted" }, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col", class: x.num ? "num" : null }, x.label || x)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((v, i) => h("td", { class: headers[i].num ? "num" : null }, v)))))));
}

// ---- sign in -----------------------------------------------------------

function signInPage() {
  const key = input("key", { type: "password", autocomplete: "off", spellcheck: "false" });
  const form = h("form", { novalidate: true },
    field("API key", key, "A key with the support permission. It stays in this tab only, until you sign out or close it."),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Sign in")), formError());
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors(form);
    sessionStorage.setItem(keyItem, key.value.trim());
    try {
      const { data } = await call("GET", "/v1/client");
      if (!data.permissions.includes("support")) {
        throw new ApiError(403, { code: "permission_denied", detail: `key: client ${data.name} lacks the support permission the console needs` });
      }
      sessionStorage.setItem(clientItem, JSON.stringify(data));
      const next = sessionStorage.getItem("coffer.next");
      sessionStorage.removeItem("coffer.next");
      go(next && next !== "/console/signin" ? next : "/console/", `Signed in as ${data.name}.`);
    } catch (err) {
      sessionStorage.removeItem(keyItem);
      if (err.code === "unauthenticated") err.message = "key: coffer knows no client with this key";
      showError(form, err);
    }
  });
  main.append(h("h1", {}, "Sign in"), h("div", { class: "card" }, form));
}

// ---- find --------------------------------------------------------------

function findPage() {
  const c = client();
  const nsOptions = c.namespaces.map(String);

  const byId = h("form", { novalidate: true, id: "find-player" },
    h("div", { class: "row" }, field("Namespace", select("namespace", nsOptions)), field("Player id", input("player_id", { inputmode: "numeric" }))),
    h("button", { type: "submit" }, "Open player"), formError());
  byId.addEventListener("submit", (e) => {
    e.preventDefault();
    clearErrors(byId);
    const p = byId.player_id.value.trim();
    if (!/^[1-9]\d*$/.test(p)) return showError(byId, new ApiError(400, { code: "invalid_argument", detail: "player_id: must be an integer id > 0" }));
    go(`/console/ns/${byId.namespace.value}/players/${p}`);
  });

  const byOrder = h("form", { novalidate: true, id: "find-order" },
    h("div", { class: "row" }, field("Namespace", select("namespace", nsOptions)), field("Store", input("store", { placeholder: "steam" }))),
    field("Order id", input("order_id")), h("button", { type: "submit" }, "Find the player"), formError());
  byOrder.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors(byOrder);
    try {
      const { data } = await call("GET", `/v1/namespaces/${enc(byOrder.namespace.value)}/orders/${enc(byOrder.store.value)}/${enc(byOrder.order_id.value)}`);
      go(`/console/ns/${data.namespace}/players/${data.player_id}${q({ idempotency_key: data.idempotency_key })}`,
        `Store ${data.store} order ${data.order_id} was presented for player ${data.player_id} by ${who(data.emitter)} (key ${data.idempotency_key}) at ${time(data.created_at)}.`);
    } catch (err) {
      showError(byOrder, err, { not_found: "order_id" });
    }
  });

  const byKey = h("form", { novalidate: true, id: "find-key" },
    h("div", { class: "row" }, field("Namespace", select("namespace", nsOptions)), field("Player id", input("player_id", { inputmode: "numeric" }))),
    field("Idempotency key", input("idempotency_key"), "A key is scoped to its player: give both. Any client's trx under the key are listed."),
    h("button", { type: "submit" }, "Find the trx"), formError());
  byKey.addEventListener("submit", (e) => {
    e.preventDefault();
    clearErrors(byKey);
    const p = byKey.player_id.value.trim();
    if (!/^[1-9]\d*$/.test(p)) return showError(byKey, new ApiError(400, { code: "invalid_argument", detail: "player_id: must be an integer id > 0" }));
    go(`/console/ns/${byKey.namespace.value}/players/${p}${q({ idempotency_key: byKey.idempotency_key.value })}`);
  });

  main.append(h("h1", {}, "Find a player"), h("div", { class: "grid" },
    h("section", { class: "card", "aria-labelledby": "h-id" }, h("h2", { id: "h-id" }, "By player id"), byId),
    h("section", { class: "card", "aria-labelledby": "h-order" }, h("h2", { id: "h-order" }, "By store order"), byOrder),
    h("section", { class: "card", "aria-labelledby": "h-key" }, h("h2", { id: "h-key" }, "By idempotency key"), byKey)));
}

// ---- the player --------------------------------------------------------

// playerPage makes three calls, side by side: the balances with lots,
// the pending holds, and a page of the finlog (filtered by the URL's
// query).
async function playerPage(ns, player) {
  const filters = Object.fromEntries(new URLSearchParams(location.search));
  const base = playerPath(ns, player);
  const [bal, holds, log] = await Promise.all([
    call("GET", base + "/balances?lots=true"),
    call("GET", base + "/finlog" + q({ status: "pending", order: "desc", limit: 500 })),
    call("GET", base + "/finlog" + q(Object.assign({ order: "desc", limit: 50 }, filters))),
  ]);
  const state = { ns, player, balances: bal.data, holds: holds.data.items, reload: () => route() };
  main.append(h("h1", {}, `Player ${player} in namespace ${ns}`),
    h("p", { class: "muted" }, `Balance version ${bal.data.version}. Link for a ticket: `, h("a", { href: location.pathname, "data-nav": true }, location.origin + location.pathname)));
  main.append(balancesSection(state), holdsSection(state));
  if (can("support_write")) main.append(correctionsSection(state));
  main.append(pastSection(state), finlogSection(state, filters, log.data));
}

// reserved is what the player's pending holds take, per currency.
function reserved(holds) {
  const out = {};
  for (const t of holds) for (const o of t.ops) if (o.kind === "consume") out[o.currency] = (out[o.currency] || 0) - o.amount;
  return out;
}

function balancesSection(state) {
  const res = reserved(state.holds);
  const rows = state.balances.balances.map((b) => [b.currency, fmt(b.total), fmt(b.paid), fmt(b.free), fmt(res[b.currency] || 0)]);
  const lots = state.balances.balances.flatMap((b) => (b.lots || []).map((l) => [l.id, l.currency, l.paid ? "paid" : "free", fmt(l.amount),
    l.expires_at ? time(l.expires_at) : "never", l.priority, time(l.created_at)]));
  return h("section", { "aria-labelledby": "h-bal", id: "balances" }, h("h2", { id: "h-bal" }, "Balances now"),
    rows.length ? table(["Currency", { label: "Total", num: 1 }, { label: "Paid", num: 1 }, { label: "Free", num: 1 }, { label: "Reserved by pending holds", num: 1 }], rows)
      : h("p", { class: "muted" }, "No balance: the player has no coins."),
    h("details", {}, h("summary", {}, `Lots (${lots.length})`),
      table(["Lot", "Currency", "Origin", { label: "Amount", num: 1 }, "Expires", { label: "Priority", num: 1 }, "Created"], lots)));
}

function holdsSection(state) {
  const sec = h("section", { "aria-labelledby": "h-holds", id: "holds" }, h("h2", { id: "h-holds" }, `Pending holds (${state.holds.length})`));
  if (!state.holds.length) sec.append(h("p", { class: "muted" }, "None."));
  for (const t of state.holds) {
    const card = h("div", { class: "card" },
      h("div", {}, h("strong", {}, t.idempotency_key), ` by ${who(t.emitter)}, expires ${time(t.hold_expires_at)}`, t.reason ? ` — ${t.reason}` : ""),
      opsTable(t.ops));
    if (can("support_write")) card.append(holdForm(state, t));
    sec.append(card);
  }
  return sec;
}

// preview is the balances after a correction, computed here from the
// balances shown (no write): the ledger decides when it is applied.
function preview(state, deltas, note) {
  const rows = state.balances.balances.map((b) => [b.currency, fmt(b.total), fmt(b.total + (deltas[b.currency] || 0))]);
  for (const [cur, d] of Object.entries(deltas)) if (!state.balances.balances.some((b) => b.currency === cur)) rows.push([cur, "0", fmt(d)]);
  const short = rows.some((r) => Number(String(r[2]).replace(/,/g, "")) < 0);
  return h("div", { class: "preview", role: "region", "aria-label": "Preview" },
    h("h3", {}, "Preview — balances after, computed from the balances above; nothing is written until you apply"),
    table(["Currency", { label: "Total now", num: 1 }, { label: "Total after", num: 1 }], rows),
    short ? h("p", { class: "error" }, "A balance would go below zero: coffer will refuse it (insufficient_funds).") : null,
    note ? h("p", { class: "muted" }, note) : null);
}

// correction wires a form's two steps: review (a preview, no call), then
// apply (one call under the form's key). The key is made with the form
// and kept for its retries; a new correction gets a new form.
function correction(form, review, apply, byCode) {
  let key = newKey(), busy = false;
  const out = h("div", { class: "confirm" });
  form.append(out);
  form.addEventListener("input", () => out.replaceChildren());
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors(form);
    if (!out.firstChild) {
      const applyBtn = h("button", { type: "submit", class: "apply" }, "Apply");
      out.replaceChildren(review(), h("div", { class: "actions" }, applyBtn,
        h("button", { type: "button", class: "secondary", onclick: () => out.replaceChildren() }, "Cancel"), h("span", { class: "muted" }, `idempotency key ${key}`)));
      applyBtn.focus();
      return;
    }
    if (busy) return;
    busy = true;
    form.querySelectorAll("button").forEach((b) => (b.disabled = true));
    try {
      const { status, data } = await apply(key);
      out.replaceChildren(h("p", { class: "ok", role: "status" }, `${status === 201 ? "Applied" : "Already applied (a replay)"}: trx ${data.id}, key ${data.idempotency_key}.`),
        h("button", { type: "button", onclick: () => go(location.pathname, `Trx ${data.id} applied.`) }, "Reload the player"));
      form.querySelectorAll("input, select, textarea").forEach((i) => (i.disabled = true));
    } catch (err) {
      showError(form, err, byCode);
      form.querySelectorAll("button").forEach((b) => (b.disabled = false));
      if (err.code === "idempotency_conflict") {
        err.message = "this form was applied already with other values; reload the player before a new correction";
        key = newKey();
      }
    } finally {
      busy = false;
    }
  });
  return form;
}

// amountOf is what the console sends for an amount: the integer typed,
// or the text as typed, for the API to refuse with its own message.
const amountOf = (v) => (/^-?\d+$/.test(v.trim()) ? Number(v.trim()) : v);

function correctionsSection(state) {
  const currencies = state.balances.balances.map((b) => b.currency);
  const adjust = h("form", { novalidate: true, id: "adjust" },
    h("div", { class: "row" }, field("Currency", input("currency", { list: "currencies", value: currencies[0] || "" })),
      field("Amount", input("amount", { inputmode: "numeric" }), "Minor units: + grants (free), − consumes.")),
    h("datalist", { id: "currencies" }, currencies.map((c) => h("option", { value: c }))),
    field("Reason", input("reason", { "aria-required": "true" }), "Required: the ticket and why."), h("button", { type: "submit" }, "Review"), formError());
  correction(adjust,
    () => preview(state, { [adjust.currency.value]: Number(adjust.amount.value) || 0 }, "A grant adds a free lot; a consume takes lots in the currency's spend order."),
    (key) => call("POST", playerPath(state.ns, state.player) + "/transactions", {
      idempotency_key: key, ops: [{ currency: adjust.currency.value, amount: amountOf(adjust.amount.value) }], reason: adjust.reason.value, meta: { console: true },
    }), { insufficient_funds: "amount", too_many_lots: "amount" });

  const refund = h("form", { novalidate: true, id: "refund" },
    h("div", { class: "row" }, field("Store", input("store", { placeholder: "steam" })), field("Order id", input("order_id"))),
    field("Kind", select("kind", [["refund", "refund (the store refunded it)"], ["chargeback", "chargeback (the bank reversed it)"]])),
    field("Reason", input("reason", { "aria-required": "true" }), "Required."), h("button", { type: "submit" }, "Review"), formError());
  correction(refund,
    () => preview(state, {}, "A refund takes back what is left of the order's coins, then what its currency's refund policy says; what it takes is known when applied (its answer shows it, and any shortfall)."),
    (key) => call("POST", playerPath(state.ns, state.player) + "/refunds", {
      idempotency_key: key, store: refund.store.value, order_id: refund.order_id.value, kind: refund.kind.value, reason: refund.reason.value,
    }), { not_found: "order_id", already_refunded: "order_id" });

  return h("section", { "aria-labelledby": "h-fix" }, h("h2", { id: "h-fix" }, "Put it right"), h("div", { class: "grid" },
    h("div", { class: "card" }, h("h3", {}, "Grant or consume"), adjust),
    h("div", { class: "card" }, h("h3", {}, "Refund or chargeback"), refund)));
}

// holdForm commits or rolls back one pending hold. Its preview: a commit
// adds the hold's pending grants, a rollback returns its reservations.
function holdForm(state, t) {
  const form = h("form", { novalidate: true, class: "hold-form" },
    field("Finish the hold", select("finish", [["commit", "commit: apply its grants"], ["rollback", "roll back: return what it reserved"]])),
    h("button", { type: "submit" }, "Review"), formError());
  correction(form, () => {
    const d = {};
    for (const o of t.ops) {
      if (form.finish.value === "commit" && o.pending) d[o.currency] = (d[o.currency] || 0) + o.amount;
      if (form.finish.value === "rollback" && o.kind === "consume") d[o.currency] = (d[o.currency] || 0) - o.amount;
    }
    return preview(state, d);
  }, () => call("POST", playerPath(state.ns, state.player) + `/transactions/${enc(t.idempotency_key)}/${form.finish.value}` + q({ emitter: t.emitter })),
  {});
  return form;
}

function pastSection(state) {
  const at = input("at", { type: "datetime-local", step: "1" });
  const out = h("div", {});
  const form = h("form", { novalidate: true, id: "past" }, field("Moment (your time zone)", at), h("button", { type: "submit" }, "Show the balances then"), formError(), out);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors(form);
    try {
      const { data } = await call("GET", playerPath(state.ns, state.player) + "/balances?at=" + enc(localToISO(at.value)));
      out.replaceChildren(table(["Currency", { label: "Total", num: 1 }, { label: "Paid", num: 1 }, { label: "Free", num: 1 }],
        data.balances.map((b) => [b.currency, fmt(b.total), fmt(b.paid), fmt(b.free)]), `At ${time(data.at)}, version ${data.version}`));
    } catch (err) {
      showError(form, err);
    }
  });
  return h("section", { "aria-labelledby": "h-past" }, h("h2", { id: "h-past" }, "Balance at a moment"), form);
}

function opsTable(ops) {
  return table(["Currency", { label: "Amount", num: 1 }, "Kind", "Cause", "Paid", "Lot", { label: "Balance after", num: 1 }, "Value"],
    ops.map((o) => [o.currency, fmt(o.amount), o.pending ? "grant (pending)" : o.kind, o.cause, o.paid ? "paid" : "free", o.lot_id || "",
      o.pending ? "" : fmt(o.balance_after), o.value ? `${fmt(o.value.amount)} ${o.value.fiat}` : ""]));
}

// writer names the client of emitter; a support agent's (a correction,
// a refund, a hold finished) shows as done from the console, under the
// name coffer stamped in a change's meta when there is one.
function writer(emitter, stamped) {
  const c = client();
  const n = c && (c.clients || []).find((x) => x.emitter === emitter);
  const agent = stamped || (n && n.support ? n.name : null);
  return agent ? h("span", { class: "badge support" }, "console: " + agent) : who(emitter);
}

function trxDetails(t) {
  const support = t.meta && t.meta.support;
  const finisher = t.finished_by && t.finished_by !== t.emitter ? [h("br"), "finished by ", writer(t.finished_by)] : null;
  return h("details", { class: "trx", "data-trx": t.id },
    h("summary", {}, h("span", {}, time(t.created_at)), h("span", {}, t.kind), h("span", {}, t.status), h("span", {}, t.idempotency_key),
      h("span", { class: "who" }, writer(t.emitter, support && support.client), finisher), h("span", {}, t.reason || "")),
    opsTable(t.ops),
    t.meta ? h("div", {}, h("strong", {}, "Meta"), h("pre", {}, JSON.stringify(t.meta, null, 2))) : null,
    t.refund ? h("div", {}, h("strong", {}, "Refund"), h("pre", {}, JSON.stringify(t.refund, null, 2))) : null,
    h("p", { class: "muted" }, `trx ${t.id}, version ${t.version}${t.hold_expires_at ? ", hold until " + time(t.hold_expires_at) : ""}`));
}

function finlogSection(state, filters, page) {
  const currencies = state.balances.balances.map((b) => b.currency);
  const form = h("form", { novalidate: true, id: "finlog-filter" },
    h("div", { class: "row" },
      field("Currency", select("currency", [["", "any"], ...currencies.map((c) => [c, c])])),
      field("Kind", select("kind", [["", "any"], "change", "hold", "exchange", "refund", "expire"])),
      field("From (your time zone)", input("from", { type: "datetime-local" })),
      field("To", input("to", { type: "datetime-local" })),
      field("Idempotency key", input("idempotency_key"))),
    h("button", { type: "submit" }, "Filter"), formError());
  for (const n of ["currency", "kind", "idempotency_key"]) if (filters[n]) form[n].value = filters[n];
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    go(location.pathname + q({ currency: form.currency.value, kind: form.kind.value, from: localToISO(form.from.value), to: localToISO(form.to.value),
      idempotency_key: form.idempotency_key.value }));
  });
  const items = page.items.map(trxDetails);
  const more = page.next_cursor ? h("a", { href: location.pathname + q(Object.assign({}, filters, { cursor: page.next_cursor })), "data-nav": true, id: "older" }, "Older trx →") : null;
  return h("section", { "aria-labelledby": "h-log", id: "finlog" }, h("h2", { id: "h-log" }, "Finlog, newest first"), form,
    items.length ? items : h("p", { class: "muted" }, page.next_cursor ? "None on this page: look further." : "No trx."), more);
}

// ---- revenue -----------------------------------------------------------

const revenueFigures = ["deposited", "recognised", "deferred", "expired", "refunded"];
const revenueColumns = ["currency", "fiat", "opening", "deposited", "recognised", "converted_in", "converted_out", "expired", "refunded", "refund_shortfall", "deferred",
  "opening_value", "deposited_value", "recognised_value", "converted_in_value", "converted_out_value", "expired_value", "refunded_value", "refund_shortfall_value", "deferred_value"];

async function revenuePage() {
  const c = client();
  const params = Object.fromEntries(new URLSearchParams(location.search));
  const month = new Date();
  const from = params.from || new Date(Date.UTC(month.getUTCFullYear(), month.getUTCMonth(), 1)).toISOString().slice(0, 10);
  const to = params.to || new Date(Date.UTC(month.getUTCFullYear(), month.getUTCMonth() + 1, 1)).toISOString().slice(0, 10);
  const form = h("form", { novalidate: true, id: "revenue-form" }, h("div", { class: "row" },
    field("Namespace", select("namespace", c.namespaces.map(String))),
    field("From (UTC)", input("from", { type: "date", value: from })), field("To (UTC, excluded)", input("to", { type: "date", value: to })),
    field("Currency", input("currency", { placeholder: "all" }))), h("button", { type: "submit" }, "Show the report"), formError());
  form.namespace.value = params.namespace || String(c.namespaces[0]);
  form.currency.value = params.currency || "";
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    go("/console/revenue" + q({ namespace: form.namespace.value, from: form.from.value, to: form.to.value, currency: form.currency.value }));
  });
  main.append(h("h1", {}, "Revenue"), form);
  try {
    const { data } = await call("GET", `/v1/namespaces/${enc(form.namespace.value)}/reports/revenue` + q({ from: from + "T00:00:00Z", to: to + "T00:00:00Z", currency: form.currency.value }));
    main.append(revenueReport(data));
  } catch (err) {
    showError(form, err);
  }
}

function revenueReport(r) {
  const rows = r.lines.map((l) => revenueColumns.map((k) => (k === "currency" || k === "fiat" ? l[k] || "" : fmt(l[k] || 0))));
  const cell = (l, k) => (k === "currency" || k === "fiat" ? JSON.stringify(l[k] || "") : String(l[k] || 0));
  const csv = [revenueColumns.join(",")].concat(r.lines.map((l) => revenueColumns.map((k) => cell(l, k)).join(","))).join("\n") + "\n";
  const link = h("a", { href: URL.createObjectURL(new Blob([csv], { type: "text/csv" })), download: `revenue-${r.namespace}-${r.from.slice(0, 10)}-${r.to.slice(0, 10)}.csv`, id: "csv" }, "Export as CSV");
  return h("section", { "aria-labelledby": "h-rev", id: "revenue" }, h("h2", { id: "h-rev" }, `Namespace ${r.namespace}, ${time(r.from)} to ${time(r.to)}`),
    r.lines.length ? [revenueChart(r.lines), table(revenueColumns.map((k, i) => ({ label: k.replace(/_/g, " "), num: i > 1 })), rows), h("p", {}, link)]
      : h("p", { class: "muted" }, "No paid currency moved in this period."));
}

// revenueChart draws, per currency and fiat, the coins of each figure as
// bars (SVG made here: no library).
function revenueChart(lines) {
  const ns = "http://www.w3.org/2000/svg";
  const s = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    return el;
  };
  const colors = ["#0b5cad", "#1a7f37", "#9a6700", "#8250df", "#b42318"];
  const max = Math.max(1, ...lines.flatMap((l) => revenueFigures.map((f) => Math.abs(l[f] || 0))));
  const groupW = revenueFigures.length * 26 + 40, w = Math.max(600, lines.length * groupW + 60), hgt = 240;
  const svg = s("svg", { viewBox: `0 0 ${w} ${hgt + 60}`, width: w, height: hgt + 60, class: "chart", role: "img", "aria-label": "Revenue figures per currency, in coins" });
  lines.forEach((l, i) => {
    revenueFigures.forEach((f, j) => {
      const v = Math.abs(l[f] || 0), bh = (v / max) * hgt, x = 40 + i * groupW + j * 26;
      svg.append(s("rect", { x, y: hgt - bh + 10, width: 22, height: Math.max(bh, 1), fill: colors[j] }, undefined));
      svg.lastChild.append(s("title", {}, `${l.currency} ${l.fiat}: ${f} ${fmt(l[f] || 0)}`));
    });
    svg.append(s("text", { x: 40 + i * groupW, y: hgt + 30, "font-size": 13 }, `${l.currency} ${l.fiat || ""}`));
  });
  revenueFigures.forEach((f, j) => {
    svg.append(s("rect", { x: 40 + j * 110, y: hgt + 42, width: 12, height: 12, fill: colors[j] }));
    svg.append(s("text", { x: 56 + j * 110, y: hgt + 53, "font-size": 12 }, f));
  });
  return svg;
}

// ---- health ------------------------------------------------------------

async function healthPage() {
  const { data: st } = await call("GET", "/v1/status");
  main.append(h("h1", {}, "Health"),
    h("p", {}, h("strong", { id: "shards" }, `${st.shards_available} of ${st.shard_count} shards available`), ` — coffer ${st.version}, started ${time(st.started_at)}`),
    table(["Database", "Shards", "State", "Schema", "Primary", { label: "Sync standbys", num: 1 }, { label: "Connections", num: 1 }, "Checked", "Error"],
      st.databases.map((d) => [d.name, d.shards.map((r) => (r.min === r.max ? r.min : `${r.min}–${r.max}`)).join(", "),
        h("span", { class: "badge " + (d.up ? "up" : "down") }, d.up ? (d.writes_refused ? "up, writes refused" : "up") : "down"),
        d.schema_verified ? "verified" : "not verified", d.primary || "", d.synchronous_standbys ?? "", `${d.conns_acquired}/${d.conns_total} (max ${d.conns_max})`,
        time(d.checked_at), d.error || ""])),
    h("p", {}, h("button", { type: "button", onclick: () => route() }, "Refresh")));
}

route();
