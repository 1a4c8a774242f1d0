// Overview: for an organization that has never recorded a call, the first-run guide
// (pages/first-run.js); otherwise the period's total, what is tripped right now, the
// budgets nearest their limit, spend over time stacked by model, key, tag value or
// customer, what costs the most, and the latest calls as they come in.
import { get, query } from '../lib/api.js';
import { h, fill, table, field, select } from '../lib/dom.js';
import { usd } from '../lib/money.js';
import { names as loadNames } from '../lib/names.js';
import { budgetCard, usedShare } from '../lib/budget.js';
import { spendOverTime } from '../lib/spend-chart.js';
import { trippedNow, trippedSection } from '../lib/tripped.js';
import { recentCalls } from '../lib/recent-calls.js';

const PERIODS = [['7d', 'Last 7 days'], ['30d', 'Last 30 days'], ['90d', 'Last 90 days']];

export async function render(main, ctx) {
  const any = await get('/api/cost-events?limit=1', { signal: ctx.signal });
  if (!any.data.length) {
    const { firstRun } = await import('./first-run.js');
    return firstRun(main, ctx, () => overview(main, ctx, 'Your first call is in. This is your overview from now on.'));
  }
  return overview(main, ctx);
}

async function overview(main, { signal, session }, welcome) {
  const period = select(PERIODS, '30d');
  const tagKeys = (await get('/api/cost-events/tag-keys', { signal })).data;
  const top = h('div');
  const rest = h('div');
  const chart = spendOverTime({ signal, period: () => period.value, tagKeys });
  const recent = recentCalls();
  fill(main, h('h1', {}, 'Overview'),
    welcome ? h('p', { class: 'status', role: 'status' }, welcome) : null,
    h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, field('Period', period)),
    top, chart.el, rest, recent.el);
  const load = async () => {
    await Promise.all([summary([top, rest], period.value, tagKeys, { signal, session }), chart.load()]);
  };
  period.addEventListener('change', () => load().catch(() => {}));
  await Promise.all([load(), recent.start(signal)]);
}

/** Fills `top` (totals, what is tripped) and `rest` (budgets, what costs most). */
async function summary([top, rest], period, tagKeys, { signal, session }) {
  const [s, budgets, pending, names, now] = await Promise.all([
    get(`/api/cost-events/summary${query({ period })}`, { signal }).then((r) => r.data),
    get('/api/budgets', { signal }).then((r) => r.data),
    get(`/api/actions${query({ status: 'pending', limit: 100 })}`, { signal }),
    loadNames(session, { signal }),
    trippedNow(signal),
  ]);
  const tags = await Promise.all(tagKeys.slice(0, 3).map((key) =>
    get(`/api/cost-events/attribution${query({ groupBy: key, period, limit: 5 })}`, { signal }).then((r) => [key, r.data])));
  const nearest = budgets.slice().sort((a, b) => usedShare(b) - usedShare(a)).slice(0, 5);
  const keyLink = (k) => (k.apiKeyId ? h('a', { href: `/keys/${k.apiKeyId}` }, k.keyName || k.apiKeyId) : '(no key)');
  fill(top,
    h('section', { class: 'stats', 'aria-labelledby': 'total-h' },
      h('div', {}, h('h2', { id: 'total-h' }, 'Total spend'), h('p', { class: 'stat' }, usd(s.totals.totalCostMicrodollars))),
      h('div', {}, h('h2', {}, 'Requests'), h('p', { class: 'stat' }, String(s.totals.totalRequests))),
      h('div', {}, h('h2', {}, 'Waiting for approval'), h('p', { class: 'stat' },
        h('a', { href: '/actions' }, `${pending.data.length}${pending.cursor ? '+' : ''}`)))),
    trippedSection(now, budgets, names));
  fill(rest,
    h('section', { 'aria-labelledby': 'nearest-h' }, h('h2', { id: 'nearest-h' }, 'Budgets nearest their limit'),
      nearest.length ? h('ul', { class: 'budget-cards' }, nearest.map((b) => budgetCard(b, names)))
        : h('p', { class: 'empty' }, 'No budgets yet. ', h('a', { href: '/budgets' }, 'Create one'), '.')),
    h('div', { class: 'grid' },
      h('section', {}, h('h2', {}, 'Top models'), table('Models by cost', ['Model', 'Provider', 'Cost', 'Requests'],
        s.models.slice(0, 5).map((m) => [m.model, m.provider, usd(m.totalCostMicrodollars), String(m.requestCount)]))),
      h('section', {}, h('h2', {}, 'Top keys'), table('API keys by cost', ['Key', 'Cost', 'Requests'],
        s.keys.slice(0, 5).map((k) => [keyLink(k), usd(k.totalCostMicrodollars), String(k.requestCount)]))),
      h('section', {}, h('h2', {}, 'Top tags'), tags.length ? tags.map(([key, a]) => table(`Tag ${key}`, [`${key}`, 'Cost', 'Requests'],
        a.groups.map((g) => [g.key, usd(g.totalCostMicrodollars), String(g.requestCount)]))) : h('p', { class: 'empty' }, 'No tagged spend in the last 7 days.'))));
}
