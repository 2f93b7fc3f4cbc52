/* throttle.js: what an expensive redraw may cost: Throttle runs one at most every
 * max(minMs, cost / share) ms, and timed() adds up each part's main-thread time (perf). */
// Cumulative main-thread cost per part, for the bench and for tuning: {name: {n, ms}}.
export const perf = {};
export function timed(name, fn) {
  const t0 = performance.now();
  try { return fn(); } finally {
    const p = perf[name] || (perf[name] = { n: 0, ms: 0 });
    p.n++; p.ms += performance.now() - t0;
  }
}

/** Runs an expensive redraw at most every max(minMs, cost / share) ms, where cost is
 * the recent draw time: a renderer never takes more than `share` of the main thread,
 * and skips drawing while its element is scrolled out of view. */
export class Throttle {
  constructor(name, el, minMs, share) {
    this.name = name; this.minMs = minMs; this.share = share;
    this.cost = 0; this.last = 0; this.timer = null; this.visible = true; this.fn = null;
    if (el && "IntersectionObserver" in window) {
      new IntersectionObserver((entries) => {
        this.visible = entries[entries.length - 1].isIntersecting;
        if (this.visible && this.fn) this.poke(this.fn);
      }).observe(el);
    }
  }
  /** Run `fn` now, whatever the gap (a first picture after a snapshot). */
  now(fn) {
    clearTimeout(this.timer);
    this.timer = null;
    this.last = 0;
    this.poke(fn);
  }
  poke(fn) {
    this.fn = fn;
    if (this.timer || !this.visible) return;
    const gap = Math.max(this.minMs, this.cost / this.share);
    const wait = gap - (performance.now() - this.last);
    if (wait > 0) { this.timer = setTimeout(() => { this.timer = null; this.poke(this.fn); }, wait); return; }
    const f = this.fn;
    this.fn = null;
    const t0 = performance.now();
    timed(this.name, f);
    this.last = performance.now();
    // The cost includes the style/layout/paint the draw causes: measure up to the moment
    // after the next frame has been produced.
    requestAnimationFrame(() => setTimeout(() => {
      const took = Math.min(performance.now() - t0, 2000);
      this.cost = this.cost ? 0.7 * this.cost + 0.3 * took : took;
    }, 0));
  }
}
