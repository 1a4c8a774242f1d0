// Money: the API speaks integer microdollars; the page shows dollars with two
// decimals, rounded half away from zero to the cent, computed on BigInt so no
// float rounding creeps in.

const MICROS_PER_CENT = 10000n;

/** `$1,234.57` for 1234567890 microdollars; `-$0.50` for -500000. */
export function usd(micros) {
  if (micros === null || micros === undefined) return '—';
  let m = BigInt(micros);
  const negative = m < 0n;
  if (negative) m = -m;
  const cents = (m + MICROS_PER_CENT / 2n) / MICROS_PER_CENT;
  const dollars = (cents / 100n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  const rest = (cents % 100n).toString().padStart(2, '0');
  return `${negative && cents > 0n ? '-' : ''}$${dollars}.${rest}`;
}

/** Parses a dollar amount typed by a person ("12", "12.5", "0.000001") into
 * microdollars, exactly; null when it is not a non-negative amount. */
export function parseUsd(text) {
  const t = String(text).trim().replace(/^\$/, '').replace(/,/g, '');
  const m = /^(\d+)(?:\.(\d{1,6}))?$/.exec(t);
  if (!m) return null;
  const micros = BigInt(m[1]) * 1000000n + BigInt((m[2] || '').padEnd(6, '0'));
  if (micros > BigInt(Number.MAX_SAFE_INTEGER)) return null;
  return Number(micros);
}

/** Microdollars as an exact dollar string for a form field ("12.5"). */
export function usdInput(micros) {
  const m = BigInt(micros);
  const whole = m / 1000000n;
  const frac = (m % 1000000n).toString().padStart(6, '0').replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : `${whole}`;
}

/** Whole percent of part over total, for display. */
export function percent(part, total) {
  if (!total) return '—';
  return `${Math.round((Number(part) * 100) / Number(total))}%`;
}
