// Charts drawn as inline SVG (no library: a few dozen lines cover bars, stacks and a
// read-out, and nothing has to be fetched or trusted). Every chart is described for
// screen readers, and the stacked one has a read-out of the day under the pointer or
// the keyboard's focus (arrow keys move it).
import { h } from './dom.js';
import { usd } from './money.js';

const NS = 'http://www.w3.org/2000/svg';
const DAY_MS = 86400000;
/** Series colours, each at least 3:1 against the white card; "other" is grey. */
export const PALETTE = ['#1f5f8b', '#c2571a', '#2e7d4f', '#8a3ea8', '#b0343c', '#0f7a85', '#7a6a00', '#5a4fcf'];
const OTHER = '#8c96a3';

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

/** Every UTC date of the last `days` days, oldest first, plus any in `extra`. */
export function calendar(days, extra = []) {
  const now = new Date();
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  const out = new Set();
  for (let i = days - 1; i >= 0; i -= 1) out.add(new Date(today - i * DAY_MS).toISOString().slice(0, 10));
  for (const d of extra) out.add(d);
  return [...out].sort();
}

/** `points`: `[{ label, value }]` with values in microdollars. */
export function barChart(points, description) {
  return stackedChart(points.map((p) => p.label), [{ label: 'Spend', values: new Map(points.map((p) => [p.label, p.value])) }], description);
}

/**
 * A stacked bar chart, one bar per date: `series` is `[{ label, values: Map(date →
 * microdollars), other? }]`, drawn bottom-up in order. Returns a figure with the
 * chart, its legend (each series' total) and the read-out.
 */
export function stackedChart(dates, series, description) {
  const width = 720;
  const height = 200;
  const pad = 8;
  const left = 64;
  const totals = dates.map((d) => series.reduce((sum, s) => sum + Number(s.values.get(d) || 0), 0));
  const max = Math.max(1, ...totals);
  const slot = (width - left - pad) / Math.max(dates.length, 1);
  const bar = Math.max(1, Math.min(36, slot * 0.75));
  const grand = totals.reduce((a, b) => a + b, 0);
  const colour = (s, i) => (s.other ? OTHER : PALETTE[i % PALETTE.length]);
  const chart = svg('svg', { viewBox: `0 0 ${width} ${height + 28}`, class: 'chart', role: 'img', tabindex: 0,
    'aria-label': `${description}: ${usd(grand)} in total. Use the left and right arrow keys to read each day.` });
  for (const f of [0, 0.5, 1]) {
    const y = height - f * (height - 12);
    chart.append(svg('line', { x1: left, y1: y, x2: width - pad, y2: y, class: f ? 'grid' : 'axis' }));
    chart.append(svg('text', { x: left - 6, y: y + 4, class: 'tick', 'text-anchor': 'end' }, usd(Math.round(max * f))));
  }
  const columns = dates.map((date, i) => {
    const x = left + i * slot + (slot - bar) / 2;
    const g = svg('g', { class: 'day', 'data-date': date });
    let y = height;
    series.forEach((s, si) => {
      const v = Number(s.values.get(date) || 0);
      if (v <= 0) return;
      const hgt = (v / max) * (height - 12);
      y -= hgt;
      g.append(svg('rect', { x, y, width: bar, height: Math.max(hgt, 0.5), fill: colour(s, si), 'data-series': s.label, 'data-cost': v },
        svg('title', {}, `${date} · ${s.label}: ${usd(v)}`)));
    });
    g.append(svg('rect', { x: left + i * slot, y: 0, width: slot, height, class: 'hit' }));
    chart.append(g);
    return g;
  });
  if (dates.length) {
    chart.append(svg('text', { x: left, y: height + 18, class: 'tick' }, dates[0]));
    chart.append(svg('text', { x: width - pad, y: height + 18, class: 'tick', 'text-anchor': 'end' }, dates[dates.length - 1]));
  }
  const readout = h('p', { class: 'readout', 'aria-live': 'polite' }, 'Point at or focus the chart to read a day.');
  let selected = -1;
  function show(i) {
    if (i < 0 || i >= dates.length) return;
    columns[selected]?.classList.remove('selected');
    selected = i;
    columns[i].classList.add('selected');
    const parts = series.map((s) => [s.label, Number(s.values.get(dates[i]) || 0)]).filter(([, v]) => v > 0);
    readout.replaceChildren(h('strong', {}, dates[i]), `: ${usd(totals[i])}`,
      parts.length ? ` — ${parts.map(([l, v]) => `${l} ${usd(v)}`).join(', ')}` : ' — no spend');
  }
  chart.addEventListener('pointermove', (e) => {
    const box = chart.getBoundingClientRect();
    const x = ((e.clientX - box.left) / box.width) * width;
    show(Math.floor((x - left) / slot));
  });
  chart.addEventListener('keydown', (e) => {
    const moves = { ArrowLeft: selected - 1, ArrowRight: selected + 1, Home: 0, End: dates.length - 1 };
    if (!(e.key in moves)) return;
    e.preventDefault();
    show(selected < 0 && e.key.startsWith('Arrow') ? dates.length - 1 : moves[e.key]);
  });
  chart.addEventListener('focus', () => { if (selected < 0) show(dates.length - 1); });
  const legend = h('ul', { class: 'legend' }, series.map((s, i) => {
    const total = [...s.values.values()].reduce((a, v) => a + Number(v), 0);
    const swatch = h('span', { class: 'swatch', 'aria-hidden': 'true' });
    swatch.style.background = colour(s, i);
    return h('li', {}, swatch, h('span', { class: 'series-name' }, s.label), ' ', h('span', { class: 'series-total' }, usd(total)));
  }));
  return h('figure', { class: 'chart-block' }, chart, readout, series.length > 1 ? legend : null,
    h('figcaption', {}, description, ': ', h('strong', { class: 'chart-total', 'data-micros': grand }, usd(grand))));
}
