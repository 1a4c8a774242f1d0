// Spend over time, stacked by model, API key, tag value or customer, from
// `GET /api/cost-events/daily` (the day rollups): the costliest series apart, the
// rest as "Other", so the stack of each day is that day's total.
import { get, query } from './api.js';
import { h, fill, field, select } from './dom.js';
import { stackedChart, calendar } from './chart.js';

const BYS = [['model', 'Model'], ['api_key', 'API key'], ['tag', 'Tag value'], ['customer', 'Customer']];

/** The chart of one `daily` answer over `days` days. */
export function dailyChart(d, days, description) {
  const dates = calendar(days, d.daily.map((p) => p.date));
  const series = d.series.map((s) => ({ label: s.name || s.key, values: new Map(s.daily.map((p) => [p.date, p.cost])) }));
  if (d.other.requestCount || d.other.totalCostMicrodollars) {
    series.push({ label: 'Other', other: true, values: new Map(d.other.daily.map((p) => [p.date, p.cost])) });
  }
  return stackedChart(dates, series, description);
}

/** A section with the "stack by" choice (and the tag key when by tag) and the chart;
 * `period()` gives the current `7d`/`30d`/`90d`. Returns `{ el, load }`. */
export function spendOverTime({ signal, period, tagKeys }) {
  const by = select(BYS, 'model');
  by.id = 'stack-by';
  const tagKey = select((tagKeys.length ? tagKeys : ['']).map((k) => [k, k || '(no tags yet)']), tagKeys[0] || '');
  tagKey.id = 'stack-tag-key';
  const tagField = field('Tag key', tagKey);
  const body = h('div', { class: 'chart-slot' });
  const el = h('section', { 'aria-labelledby': 'over-time-h' }, h('h2', { id: 'over-time-h' }, 'Spend over time'),
    h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, field('Stack by', by), tagField), body);
  async function load() {
    tagField.hidden = by.value !== 'tag';
    if (by.value === 'tag' && !tagKey.value) {
      fill(body, h('p', { class: 'empty' }, 'No tagged spend in the last 7 days.'));
      return;
    }
    const p = period();
    const d = (await get(`/api/cost-events/daily${query({ by: by.value, tagKey: by.value === 'tag' ? tagKey.value : '', period: p, limit: 6 })}`, { signal })).data;
    const label = BYS.find(([v]) => v === by.value)[1].toLowerCase();
    fill(body, d.daily.length ? dailyChart(d, Number.parseInt(p, 10), `Daily spend by ${by.value === 'tag' ? `${tagKey.value} value` : label}, last ${Number.parseInt(p, 10)} days`)
      : h('p', { class: 'empty' }, 'No spend in this period.'),
    by.value === 'customer' ? h('p', { class: 'hint' }, 'Bound customers and customers with a budget are shown apart; the rest is in Other.') : null);
  }
  by.addEventListener('change', () => load().catch(() => {}));
  tagKey.addEventListener('change', () => load().catch(() => {}));
  return { el, load };
}
