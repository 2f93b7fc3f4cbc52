/* waiting.js: BS.waitingText(req, reason, detail), why a request waits at a step in one
 * sentence with the scheduler's numbers. A line-for-line mirror of engine/waiting.py's
 * waiting_text (the JSON twins call that one); a browser test checks they agree. */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});

  function s(n) { return n !== 1 ? "s" : ""; }
  function v(x, dflt) { return x === undefined || x === null ? (dflt === undefined ? "None" : dflt) : x; }

  BS.waitingText = function (req, reason, detail) {
    const d = detail || {};
    const head = d.head;
    if (reason === "policy_order" && head) {
      const order = d.policy === "priority" ? "priority" : "FCFS";
      return "behind " + head + " in " + order + " order";
    }
    if (reason === "kv_blocks") {
      const what = d.full_sequence ? "its whole sequence" : "this chunk";
      return "waits: KV pool full (" + v(d.blocks_used) + " of " + v(d.blocks_usable) +
        " usable blocks used, " + v(d.blocks_free) + " free); " + req + " needs " +
        v(d.blocks_needed) + " more blocks for " + what;
    }
    if (reason === "token_budget" && "budget_max" in d) {
      const parts = [];
      if (d.num_decodes) parts.push(d.num_decodes + " decode" + s(d.num_decodes));
      if (d.largest_chunk_req) {
        const more = d.num_prefill_chunks - 1;
        const extra = more ? " + " + more + " more prefill chunk" + s(more) : "";
        parts.push(d.largest_chunk_req + " prefill chunk " + d.largest_chunk_tokens + extra);
      }
      const spent = parts.join(" + ") || "nothing";
      return "waits: token budget used (" + d.budget_used + "/" + d.budget_max + ": " + spent + ")";
    }
    if (reason === "max_num_seqs") return "waits: max_num_seqs " + v(d.max_num_seqs, "?") + " reached";
    if (reason === "no_chunking_fit") {
      return "waits: chunked prefill is off and " + req + "'s " + v(d.tokens_needed) +
        " tokens do not fit the " + v(d.budget_left) + " left in the budget";
    }
    if (reason === "preemption_this_step") {
      return "waits: " + v(d.num_preempted, "a") + " request(s) were preempted this step";
    }
    if (reason === "static_batch") {
      return "waits: static batching admits a new batch only when the current one (" +
        v(d.batch_size, "?") + " rows) has finished";
    }
    if (reason === "paused") return "waits: the engine is paused";
    return "waits: " + reason;
  };
})();
