/* waiting.js: waitingText(req, reason, detail), why a request waits at a step in one
 * sentence with the scheduler's numbers. The sentences are engine/waiting.py's
 * WAITING_SENTENCES (static/js/protocol.js, generated); this reads them the way its
 * waiting_text does (the placeholders: that module's docstring), so the page words a
 * reason as the JSON twins do. Tests check the two agree on every reason. */
import { NO_PARTS, PARTS_JOINER, WAITING_FALLBACK, WAITING_SENTENCES } from "./protocol.js";

const PLACEHOLDER = /\{([^{}]*)\}/g;

/** `s` cut at the first `sep`: [before, after], after null without one. */
function cut(s, sep) {
  const at = s.indexOf(sep);
  return at < 0 ? [s, null] : [s.slice(0, at), s.slice(at + 1)];
}

/** A term's value: `x` or `x-N` (x less N); null when x is missing. */
function term(values, t) {
  const [name, less] = cut(t, "-");
  const v = Object.hasOwn(values, name) ? values[name] : null;
  if (v === undefined || v === null) return null;
  return less ? v - Number(less) : v;
}

/** A value as Python's str() writes it (`dflt` for none). */
function text(v, dflt) {
  if (v === null) return dflt;
  if (typeof v === "boolean") return v ? "True" : "False";
  return String(v);
}

function holds(sentence, values) {
  return (sentence.when || []).every((t) => !!term(values, t));
}

function say(sentence, values) {
  return sentence.text.replace(PLACEHOLDER, (_, body) => fill(body, sentence, values));
}

/** The words of one placeholder (its `body`, between the braces). */
function fill(body, sentence, values) {
  if (body === "parts") {
    const said = (sentence.parts || []).filter((p) => holds(p, values)).map((p) => say(p, values));
    return said.join(PARTS_JOINER) || NO_PARTS;
  }
  if (body.endsWith(":s")) return term(values, body.slice(0, -2)) === 1 ? "" : "s";
  const [t, dflt] = cut(body, "|");
  const [test, choice] = cut(t, "?");
  if (choice !== null) {
    const [yes, no] = cut(choice, "/");
    const [name, want] = cut(test, "=");
    const v = term(values, name);
    const hit = want !== null ? text(v, "") === want : !!v;
    return hit ? yes : no || "";
  }
  return text(term(values, t), dflt === null ? "None" : dflt);
}

export function waitingText(req, reason, detail) {
  const values = Object.assign({}, detail, { req: req, reason: reason });
  const sentences = Object.hasOwn(WAITING_SENTENCES, reason) ? WAITING_SENTENCES[reason] : [];
  for (const sentence of sentences) if (holds(sentence, values)) return say(sentence, values);
  return say(WAITING_FALLBACK, values);
}
