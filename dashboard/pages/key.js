// One API key's page: its budget at a glance, its spend over time stacked by model,
// its top models, and its latest calls as they come in. Spend comes from the
// rollups (`/api/cost-events/daily` for the chart, the attribution detail for the
// models), calls from the cost-event list filtered by the key.
import { get, query } from '../lib/api.js';
import { h, fill, field, select, table, time, code, copyId } from '../lib/dom.js';
import { usd } from '../lib/money.js';
import { names as loadNames } from '../lib/names.js';
import { dailyChart } from '../lib/spend-chart.js';
import { recentCalls } from '../lib/recent-calls.js';
import { budgetCard } from '../lib/budget.js';

const PERIODS = [['7d', 'Last 7 days'], ['30d', 'Last 30 days'], ['90d', 'Last 90 days']];

export async function render(main, { signal, session, id, title }) {
  const names = await loadNames(session, { signal, fresh: true });
  const key = names.keyList.find((k) => k.id === id);
  const name = key?.name || names.keys.get(id);
  title(`Key ${name || id}`);
  const period = select(PERIODS, '30d');
  const body = h('div');
  const calls = recentCalls({ filter: { apiKeyId: id }, title: 'Recent calls of this key' });
  fill(main, h('p', {}, h('a', { href: '/keys' }, '← All API keys')),
    h('h1', {}, 'API key: ', name || code(id), ' ', copyId(id, 'the key id')),
    key ? h('dl', { class: 'detail' },
      h('dt', {}, 'Key'), h('dd', {}, code(`${key.keyPrefix}…`)),
      h('dt', {}, 'Created'), h('dd', {}, time(key.createdAt)),
      h('dt', {}, 'Last used'), h('dd', {}, key.lastUsedAt ? time(key.lastUsedAt) : 'never'))
      : h('p', { class: 'muted' }, 'This key is revoked or not in this organization; its past spend is below.'),
    h('div', { id: 'key-budget' }),
    h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, field('Period', period)), body, calls.el);
  const budgets = (await get('/api/budgets', { signal })).data.filter((b) => b.entityType === 'api_key' && b.entityId === id);
  fill(main.querySelector('#key-budget'), budgets.length ? h('section', {}, h('h2', {}, 'Budget'),
    h('ul', { class: 'budget-cards' }, budgets.map((b) => budgetCard(b, names)))) : null);

  async function load() {
    const p = period.value;
    const [d, a] = await Promise.all([
      get(`/api/cost-events/daily${query({ by: 'model', apiKeyId: id, period: p, limit: 6 })}`, { signal }).then((r) => r.data),
      get(`/api/cost-events/attribution/${encodeURIComponent(id)}${query({ groupBy: 'api_key', period: p })}`, { signal }).then((r) => r.data),
    ]);
    const days = Number.parseInt(p, 10);
    fill(body,
      h('section', { class: 'stats' },
        h('div', {}, h('h2', {}, 'Spend'), h('p', { class: 'stat' }, usd(a.totalCostMicrodollars))),
        h('div', {}, h('h2', {}, 'Requests'), h('p', { class: 'stat' }, String(a.requestCount))),
        h('div', {}, h('h2', {}, 'Average per call'), h('p', { class: 'stat' }, usd(a.avgCostMicrodollars)))),
      h('h2', {}, 'Trend'),
      d.daily.length ? dailyChart(d, days, `Daily spend of this key by model, last ${days} days`) : h('p', { class: 'empty' }, 'No spend in this period.'),
      h('h2', {}, 'Top models'),
      table('Models by cost', ['Model', 'Cost', 'Requests'], a.models.slice(0, 10).map((m) => [m.model, usd(m.cost), String(m.count)]), 'No calls in this period.'));
  }
  period.addEventListener('change', () => load().catch(() => {}));
  await Promise.all([load(), calls.start(signal)]);
}
