/* release_pair.js: "compare releases" buttons (a recording in replay, a scenario in the
 * scenario list). Each records one trace under two vLLM releases
 * (POST /api/compare/releases) and opens their comparison, the first difference marked. */
import { api, flash } from "./common.js";

async function pair(button, body) {
  button.disabled = true;
  flash(true, "running the trace under vLLM " + body.a + " and " + body.b + "…");
  try {
    const out = await api("POST", "/api/compare/releases", body);
    location.assign(out.href);
  } catch (e) {
    flash(false, e.message);
    button.disabled = false;
  }
}

document.addEventListener("click", function (ev) {
  const button = ev.target.closest && ev.target.closest("[data-release-pair]");
  if (!button) return;
  ev.preventDefault();
  const form = button.closest("form");
  const pick = (name, fallback) => {
    const el = form && form.querySelector("[name=" + name + "]");
    return el ? el.value : fallback;
  };
  const body = { a: pick("a", "0.20"), b: pick("b", "0.33") };
  if (button.dataset.session) body.session = button.dataset.session;
  if (button.dataset.scenario) body.scenario = button.dataset.scenario;
  pair(button, body);
});
