// Durations: a number of milliseconds, or a string such as "500ms", "2s",
// "1.5m", "1h", "1d".

const UNITS = { ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000 };

/** The duration v in milliseconds; a TypeError names `what` when v is not one. */
export function toMs(v, what) {
  if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return v;
  const m = typeof v === 'string' ? /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(v) : null;
  if (m === null) {
    throw new TypeError(`${what}: expected milliseconds or a duration like "30s", got ${JSON.stringify(v)}`);
  }
  return Number(m[1]) * UNITS[m[2]];
}

/** The duration as a PostgreSQL interval literal. */
export function toInterval(v, what) {
  return `${Math.round(toMs(v, what))} milliseconds`;
}
