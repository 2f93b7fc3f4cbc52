/* modes.js: what kind of engine loop the session runs, in the top bar: async or sync
 * scheduling, speculative decoding (K drafts), static batching, the vLLM release whose
 * semantics it follows (or a node's own release). Under async scheduling
 * also the batch queue: the steps whose output is still in flight and which step's output
 * the latest step applied. The request table shows its async / spec columns only then. */
const st = { key: "" };

function set(id, text, show, title) {
  const e = document.getElementById(id);
  if (!e) return;
  e.hidden = !show;
  if (e.textContent !== text) e.textContent = text;
  if (title !== undefined && e.title !== title) e.title = title;
}

function render(model) {
  const c = model.config || {};
  const async = !!c.async_scheduling;
  const k = c.num_speculative_tokens || 0;
  const stat = c.batching === "static";
  const key = [async, k, stat].join(":");
  if (key !== st.key) {
    st.key = key;
    document.body.classList.toggle("mode-async", async);
    document.body.classList.toggle("mode-spec", k > 0);
    document.body.dataset.sched = async ? "async" : "sync";
  }
  set("mode-sched", async ? "async" : "sync", !!model.session,
    async ? "async scheduling: the next batch is scheduled before this one's output is applied (batch queue of 2)"
      : "sync scheduling: each step applies its own output");
  set("mode-spec", "spec K=" + k, k > 0, "speculative decoding: up to " + k + " n-gram drafts per request and step");
  set("mode-static", "static batching", stat, "a new batch is admitted only when the whole batch has finished");
  // The vLLM release the session decides as: our engine's knob, or a node's own release.
  const meta = model.meta || {};
  const release = c.vllm_version || meta.vllm_version || "";
  set("mode-release", "vLLM " + release, !!release && !!model.session,
    meta.engine === "vllm" ? "a vLLM node running vLLM " + release
      : "scheduling semantics of vLLM " + release + " (docs/vllm_releases.md)");
  const u = model.lastUpdate;
  const flight = model.batches.length ? "in flight: step " + model.batches.join(", ") : "queue empty";
  const applied = u && u.updated !== null ? " · step " + u.step + " applied step " + u.updated : "";
  set("hdr-batches", flight + applied, async && !!u);
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "modes", render: render };
