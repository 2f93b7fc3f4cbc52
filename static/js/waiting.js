/* waiting.js: waitingText(req, reason, detail), why a request waits at a step in one
 * sentence with the scheduler's numbers. A line-for-line mirror of engine/waiting.py's
 * waiting_text (the JSON twins call that one); a browser test checks they agree. */
import { GATE_TEXTS, REASON } from "./protocol.js";

function s(n) { return n !== 1 ? "s" : ""; }
function v(x, dflt) { return x === undefined || x === null ? (dflt === undefined ? "None" : dflt) : x; }

// The reason codes and the vLLM-only gates' texts: static/js/protocol.js (generated).
const R = REASON;

export function waitingText(req, reason, detail) {
  const d = detail || {};
  const head = d.head;
  if (reason === R.POLICY_ORDER && head) {
    const order = d.policy === "priority" ? "priority" : "FCFS";
    return "behind " + head + " in " + order + " order";
  }
  if (reason === R.KV_BLOCKS) {
    const what = d.full_sequence ? "its whole sequence" : "this chunk";
    return "waits: KV pool full (" + v(d.blocks_used) + " of " + v(d.blocks_usable) +
      " usable blocks used, " + v(d.blocks_free) + " free); " + req + " needs " +
      v(d.blocks_needed) + " more blocks for " + what;
  }
  if (reason === R.TOKEN_BUDGET && "padded_tokens" in d) {
    return "waits: a new decode is padded to " + d.padded_tokens + " tokens (speculative " +
      "decoding) and only " + v(d.budget_left) + " are left in the budget";
  }
  if (reason === R.TOKEN_BUDGET && "budget_max" in d) {
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
  if (reason === R.MAX_NUM_SEQS) return "waits: max_num_seqs " + v(d.max_num_seqs, "?") + " reached";
  if (reason === R.MAX_NUM_ACTIVE_SEQS) {
    return "waits: admission cap max_num_active_seqs " + v(d.max_num_active_seqs, "?") +
      " reached (" + v(d.num_running, "?") + " running; max_num_seqs " + v(d.max_num_seqs, "?") + ")";
  }
  if (reason === R.KV_WATERMARK) {
    return "waits: KV watermark (" + v(d.blocks_free) + " blocks free, " + v(d.watermark_blocks) +
      " kept free); " + req + " needs " + v(d.blocks_needed) + " blocks";
  }
  if (reason === R.PREFILL_THROTTLED) {
    if (d.throttled_by_coordinator) return "waits: prefill deferred on this step (data-parallel cadence)";
    return "waits: prefill throttled until step " + v(d.until_step) +
      " (prefill_schedule_interval " + v(d.prefill_schedule_interval) + ")";
  }
  if (reason === R.CACHE_AWARE_ORDER) {
    return "behind " + v(d.cache_aware_ahead) + ", moved ahead by cache-aware admission: " +
      v(d.cache_aware_cached_tokens) + " tokens of its prompt are cached " +
      "(cache_aware_admission_window " + v(d.cache_aware_window) + ")";
  }
  if (reason === R.NO_CHUNKING_FIT) {
    return "waits: chunked prefill is off and " + req + "'s " + v(d.tokens_needed) +
      " tokens do not fit the " + v(d.budget_left) + " left in the budget";
  }
  if (reason === R.PREEMPTION_THIS_STEP) {
    return "waits: " + v(d.num_preempted, "a") + " request(s) were preempted this step";
  }
  if (reason === R.STATIC_BATCH) {
    return "waits: static batching admits a new batch only when the current one (" +
      v(d.batch_size, "?") + " rows) has finished";
  }
  if (reason === R.PAUSED) return "waits: the engine is paused";
  if (GATE_TEXTS[reason]) return GATE_TEXTS[reason];
  return "waits: " + reason;
}
