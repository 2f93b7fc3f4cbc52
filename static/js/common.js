/* common.js: small helpers shared by every page (each page loads it): CSS colour lookup, DOM
 * events, HTML escaping for plotly labels, a text-only #flash message and a JSON fetch
 * that turns error answers into one readable sentence. */

export function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}
export function emit(name, detail) {
  document.body.dispatchEvent(new CustomEvent(name, { detail: detail || {}, bubbles: true }));
}
/** For strings that plotly renders as (its subset of) HTML: labels, hover text. */
export function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

export function flash(ok, message) {
  const box = document.getElementById("flash");
  if (!box) return;
  const div = document.createElement("div");
  div.className = "flash " + (ok ? "flash-ok" : "flash-error");
  div.setAttribute("role", ok ? "status" : "alert");
  div.textContent = message; // text, never markup
  box.replaceChildren(div);
}

/** The `detail` of a FastAPI error body (string or the first validation message). */
export function errorText(status, text) {
  try {
    const body = JSON.parse(text);
    if (body && typeof body.detail === "string") return body.detail;
    if (body && Array.isArray(body.detail) && body.detail[0] && body.detail[0].msg) {
      return body.detail[0].msg;
    }
  } catch (e) { /* not JSON */ }
  return "request failed (" + status + ")";
}

/** fetch() a JSON API on this origin; resolves to the parsed body, rejects with an Error
 * whose message is the server's explanation. */
export async function api(method, path, body) {
  const init = { method: method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try { resp = await fetch(path, init); } catch (e) {
    throw new Error("the server did not answer (is it still running?)", { cause: e });
  }
  const text = await resp.text();
  if (!resp.ok) throw new Error(errorText(resp.status, text));
  return text ? JSON.parse(text) : null;
}

// htmx error answers (401/403/404/409/422/503, JSON) become a #flash message as text.
document.addEventListener("htmx:beforeSwap", function (ev) {
  const xhr = ev.detail.xhr;
  if (!xhr || xhr.status < 400) return;
  ev.detail.shouldSwap = false;
  flash(false, errorText(xhr.status, xhr.responseText));
});
document.addEventListener("htmx:sendError", function () {
  flash(false, "the server did not answer (is it still running?)");
});
