// Overview: the period's total, daily spend, what costs the most, and the budgets
// closest to their limit. Everything comes from the summary, attribution and
// budgets endpoints.
import { get, query } from '../lib/api.js';
import { h, fill, table, field, select, code } from '../lib/dom.js';
import { usd, percent } from '../lib/money.js';
import { barChart } from '../lib/chart.js';

const PERIODS = [['7d', 'Last 7 days'], ['30d', 'Last 30 days'], ['90d', 'Last 90 days']];

export async function render(main, { signal }) {
  const period = select(PERIODS, '30d');
  const body = h('div');
  fill(main, h('h1', {}, 'Overview'), h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, field('Period', period)), body);
  period.addEventListener('change', () => load(body, period.value, signal));
  await load(body, period.value, signal);
}

async function load(body, period, signal) {
  const [summary, budgets, tagKeys] = await Promise.all([
    get(`/api/cost-events/summary${query({ period })}`, { signal }),
    get('/api/budgets', { signal }),
    get('/api/cost-events/tag-keys', { signal }),
  ]);
  const s = summary.data;
  const tags = await Promise.all(tagKeys.data.slice(0, 3).map((key) =>
    get(`/api/cost-events/attribution${query({ groupBy: key, period, limit: 5 })}`, { signal }).then((r) => [key, r.data])));
  fill(body,
    h('section', { class: 'stats', 'aria-labelledby': 'total-h' },
      h('div', {}, h('h2', { id: 'total-h' }, 'Total spend'), h('p', { class: 'stat' }, usd(s.totals.totalCostMicrodollars))),
      h('div', {}, h('h2', {}, 'Requests'), h('p', { class: 'stat' }, String(s.totals.totalRequests)))),
    h('section', {}, h('h2', {}, 'Daily spend'),
      s.daily.length ? barChart(everyDay(s.daily, period), `Daily spend over the ${PERIODS.find(([p]) => p === period)[1].toLowerCase()}`)
        : h('p', { class: 'empty' }, 'No spend in this period.')),
    h('div', { class: 'grid' },
      h('section', {}, h('h2', {}, 'Top models'), table('Models by cost', ['Model', 'Provider', 'Cost', 'Requests'],
        s.models.slice(0, 5).map((m) => [m.model, m.provider, usd(m.totalCostMicrodollars), String(m.requestCount)]))),
      h('section', {}, h('h2', {}, 'Top keys'), table('API keys by cost', ['Key', 'Cost', 'Requests'],
        s.keys.slice(0, 5).map((k) => [k.keyName || k.apiKeyId || '(no key)', usd(k.totalCostMicrodollars), String(k.requestCount)]))),
      h('section', {}, h('h2', {}, 'Top tags'), tags.length ? tags.map(([key, a]) => table(`Tag ${key}`, [`${key}`, 'Cost', 'Requests'],
        a.groups.map((g) => [g.key, usd(g.totalCostMicrodollars), String(g.requestCount)]))) : h('p', { class: 'empty' }, 'No tagged spend in the last 7 days.')),
      h('section', {}, h('h2', {}, 'Budgets closest to their limit'), table('Budgets by share used', ['Entity', 'Spend', 'Limit', 'Used'],
        budgets.data.slice().sort((a, b) => b.spendMicrodollars / b.maxBudgetMicrodollars - a.spendMicrodollars / a.maxBudgetMicrodollars)
          .slice(0, 5).map((b) => [h('span', {}, `${b.entityType} `, code(b.entityId)), usd(b.spendMicrodollars), usd(b.maxBudgetMicrodollars), percent(b.spendMicrodollars, b.maxBudgetMicrodollars)]),
        'No budgets yet.'))));
}

/** One point per day of the period (UTC), zero where the summary has no row. */
function everyDay(daily, period) {
  const byDate = new Map(daily.map((d) => [d.date, d.totalCostMicrodollars]));
  const days = Number.parseInt(period, 10);
  const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
  const points = [];
  for (let i = days - 1; i >= 0; i -= 1) {
    const date = new Date(today - i * 86400000).toISOString().slice(0, 10);
    points.push({ label: date, value: byDate.get(date) || 0 });
  }
  // Rows the calendar above does not cover (a clock skew) are still drawn.
  for (const d of daily) if (!points.some((p) => p.label === d.date)) points.push({ label: d.date, value: d.totalCostMicrodollars });
  return points.sort((a, b) => (a.label < b.label ? -1 : 1));
}
