// A bar chart drawn as inline SVG: one bar per day, each with a tooltip title and
// the whole chart described for screen readers.
import { usd } from './money.js';

const NS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

/** `points`: `[{ label, value }]` with values in microdollars. */
export function barChart(points, description) {
  const width = 720;
  const height = 180;
  const pad = 24;
  const max = Math.max(1, ...points.map((p) => Number(p.value)));
  const slot = (width - pad) / Math.max(points.length, 1);
  const bar = Math.min(40, Math.max(2, slot * 0.7));
  const chart = svg('svg', { viewBox: `0 0 ${width} ${height + pad}`, role: 'img', 'aria-label': description, class: 'chart' });
  chart.append(svg('line', { x1: pad, y1: height, x2: width, y2: height, class: 'axis' }));
  chart.append(svg('text', { x: 0, y: 12, class: 'tick' }, usd(max)));
  points.forEach((p, i) => {
    const hgt = (Number(p.value) / max) * (height - 16);
    const x = pad + i * slot + (slot - bar) / 2;
    chart.append(svg('rect', { x, y: height - hgt, width: bar, height: Math.max(hgt, 0), class: 'bar' },
      svg('title', {}, `${p.label}: ${usd(p.value)}`)));
  });
  if (points.length) {
    chart.append(svg('text', { x: pad, y: height + 16, class: 'tick' }, points[0].label));
    chart.append(svg('text', { x: width, y: height + 16, class: 'tick', 'text-anchor': 'end' }, points[points.length - 1].label));
  }
  return chart;
}
