/* gantt_axis.js: the timeline's x axis. In step mode x is the step number; in time mode
 * the seconds since the session started at the beginning of a step, from the times the
 * model has seen (interpolated between them, extrapolated past them), so every bar has a
 * place even where the model kept no time. Plus "nice" tick values and their labels. */

/** step -> x for `model` in `xmode`, cached per model version. */
class TimeAxis {
  constructor() { this.key = ""; this.steps = []; this.times = []; }

  refresh(model) {
    const key = model.epoch + ":" + model.tEnd.size + ":" + model.step;
    if (key === this.key) return;
    this.key = key;
    const pts = new Map();
    for (const [s, t] of model.tStart) pts.set(s, t);
    for (const [s, t] of model.tEnd) if (!pts.has(s + 1)) pts.set(s + 1, t);
    const steps = Array.from(pts.keys()).sort((a, b) => a - b);
    this.steps = steps;
    this.times = steps.map((s) => pts.get(s));
  }

  /** Seconds at the start of `step` (interpolated; 0 when nothing is known). */
  at(step) {
    const s = this.steps, t = this.times, n = s.length;
    if (!n) return 0;
    if (n === 1) return t[0];
    if (step <= s[0]) return t[0] + (step - s[0]) * slope(s, t, 0);
    if (step >= s[n - 1]) return t[n - 1] + (step - s[n - 1]) * slope(s, t, n - 2);
    let lo = 0, hi = n - 1;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (s[mid] <= step) lo = mid; else hi = mid;
    }
    return t[lo] + (step - s[lo]) * slope(s, t, lo);
  }

  /** The step whose start is at or before `x` seconds (for hit testing). */
  stepAt(x) {
    const s = this.steps, t = this.times, n = s.length;
    if (n < 2) return Math.floor(x);
    let lo = 0, hi = n - 1;
    if (x <= t[0]) return Math.floor(s[0] + (x - t[0]) / (slope(s, t, 0) || 1));
    if (x >= t[n - 1]) return Math.floor(s[n - 1] + (x - t[n - 1]) / (slope(s, t, n - 2) || 1));
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (t[mid] <= x) lo = mid; else hi = mid;
    }
    const k = slope(s, t, lo);
    return Math.floor(s[lo] + (k ? (x - t[lo]) / k : 0));
  }
}
function slope(s, t, i) {
  const ds = s[i + 1] - s[i];
  return ds > 0 ? Math.max(0, (t[i + 1] - t[i]) / ds) : 0;
}
export { TimeAxis };

/** Tick values between a and b, about `n` of them, at 1/2/5 x 10^k. */
export function niceTicks(a, b, n) {
  const span = b - a;
  if (!(span > 0)) return [];
  const raw = span / Math.max(1, n);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const unit = [1, 2, 5, 10].map((k) => k * mag).find((u) => u >= raw) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(a / unit) * unit; v <= b; v += unit) out.push(+v.toPrecision(12));
  return out;
}

export function tickLabel(v, xmode) {
  if (xmode !== "time") return String(Math.round(v));
  if (Math.abs(v) >= 100) return v.toFixed(0) + "s";
  if (Math.abs(v) >= 1) return v.toFixed(1) + "s";
  return (v * 1000).toFixed(0) + "ms";
}
