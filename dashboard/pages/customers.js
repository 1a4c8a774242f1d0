// Customers: each binding's plan and cap, the spend of its customer budget, and
// what is left; a customer's page shows its unit economics
// (`GET /api/customer-bindings/{customerId}`, the proxy's unit-economics shape),
// its spend over time and its latest calls.
import { get, post, query } from '../lib/api.js';
import { h, fill, field, select, status, table, code, time } from '../lib/dom.js';
import { usd, percent } from '../lib/money.js';
import { dailyChart } from '../lib/spend-chart.js';
import { recentCalls } from '../lib/recent-calls.js';

const PERIODS = [['7d', 'Last 7 days'], ['30d', 'Last 30 days'], ['90d', 'Last 90 days']];
const TRANSITIONS = { active: [['suspend', 'Suspend'], ['archive', 'Archive']], suspended: [['reactivate', 'Reactivate'], ['archive', 'Archive']], archived: [['reactivate', 'Reactivate']] };

export async function render(main, { signal, path, title }) {
  const id = path.startsWith('/customers/') ? decodeURIComponent(path.slice('/customers/'.length)) : '';
  if (id) return one(main, id, { signal, title });
  const msg = status();
  const list = h('div');
  fill(main, h('h1', {}, 'Customers'), h('p', { class: 'hint' }, 'Customers are bound with ', code('POST /v1/bind'), ' on the proxy.'), msg, list);

  async function refresh() {
    const [bindings, budgets] = await Promise.all([get('/api/customer-bindings', { signal }), get('/api/budgets', { signal })]);
    const spend = new Map(budgets.data.filter((b) => b.entityType === 'customer').map((b) => [b.entityId, b]));
    fill(list, bindings.data.length ? h('table', {}, h('caption', {}, 'Customer bindings'),
      h('thead', {}, h('tr', {}, ['Customer', 'Plan', 'Cap', 'Spend', 'Remaining', 'Cap used', 'Margin target', 'Status', 'Manage'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, bindings.data.map((c) => {
        const b = spend.get(c.customerId);
        const spent = b ? b.spendMicrodollars : 0;
        return h('tr', {}, h('td', {}, h('a', { href: `/customers/${encodeURIComponent(c.customerId)}` }, c.customerId)), h('td', {}, c.planRef),
          h('td', { class: 'num' }, usd(c.budgetCapMicrodollars)), h('td', { class: 'num' }, usd(spent)),
          h('td', { class: 'num' }, usd(Math.max(0, c.budgetCapMicrodollars - spent))),
          h('td', { class: 'num' }, percent(spent, c.budgetCapMicrodollars)),
          h('td', {}, c.marginTargetPercent != null ? `${c.marginTargetPercent}%` : '—'),
          h('td', {}, h('span', { class: `badge ${c.status}` }, c.status)),
          h('td', { class: 'row-actions' }, (TRANSITIONS[c.status] || []).map(([t, text]) => h('button', { type: 'button', onclick: async () => {
            try {
              await post(`/api/customer-bindings/${encodeURIComponent(c.customerId)}/${t}`);
              msg.textContent = `${c.customerId}: ${t} done.`;
            } catch (err) { msg.textContent = err.message; }
            await refresh();
          } }, text))));
      })))
      : h('p', { class: 'empty' }, 'No customers bound yet.'));
  }
  await refresh();
}

/** One customer: its unit economics when bound, its spend over time stacked by
 * model, its top models, and its latest calls as they come in. */
async function one(main, id, { signal, title }) {
  title(`Customer ${id}`);
  let d = null;
  try {
    d = (await get(`/api/customer-bindings/${encodeURIComponent(id)}`, { signal })).data;
  } catch (err) {
    if (err.status !== 404) throw err;
  }
  const period = select(PERIODS, '30d');
  const spend = h('div');
  const calls = recentCalls({ filter: { customerId: id }, title: 'Recent calls of this customer' });
  fill(main, h('p', {}, h('a', { href: '/customers' }, '← All customers')),
    h('h1', {}, 'Customer ', code(id)),
    d ? economics(d) : h('p', { class: 'muted' }, 'This customer is not bound to a plan; its spend is below.'),
    h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, field('Period', period)), spend, calls.el);
  async function load() {
    const p = period.value;
    const s = (await get(`/api/cost-events/daily${query({ by: 'model', customerId: id, period: p, limit: 10 })}`, { signal })).data;
    const days = Number.parseInt(p, 10);
    const models = s.series.map((m) => [m.key, usd(m.totalCostMicrodollars), String(m.requestCount)]);
    if (s.other.requestCount) models.push(['Other models', usd(s.other.totalCostMicrodollars), String(s.other.requestCount)]);
    fill(spend, h('h2', {}, 'Trend'),
      s.daily.length ? dailyChart(s, days, `Daily spend of ${id} by model, last ${days} days`) : h('p', { class: 'empty' }, 'No spend in this period.'),
      h('h2', {}, 'Top models'), table('Models by cost', ['Model', 'Cost', 'Requests'], models, 'No calls in this period.'));
  }
  period.addEventListener('change', () => load().catch(() => {}));
  await Promise.all([load(), calls.start(signal)]);
}

/** A bound customer's unit economics (`GET /api/customer-bindings/{customerId}`). */
function economics(d) {
  const b = d.budget;
  return [
    h('section', { class: 'stats' },
      h('div', {}, h('h2', {}, 'Lifetime cost'), h('p', { class: 'stat' }, usd(d.cost.lifetimeCostMicrodollars))),
      h('div', {}, h('h2', {}, 'Events'), h('p', { class: 'stat' }, String(d.cost.eventCount))),
      h('div', {}, h('h2', {}, 'Remaining'), h('p', { class: 'stat' }, usd(b.remainingMicrodollars)))),
    h('table', {}, h('caption', {}, 'Unit economics'), h('tbody', {},
      [['Plan', d.binding.planRef], ['Status', d.binding.status], ['Cap', usd(b.maxMicrodollars)],
        ['Spend', usd(b.spendMicrodollars)], ['Cap used', percent(b.spendMicrodollars, b.maxMicrodollars)],
        ['Margin target', d.binding.marginTargetPercent != null ? `${d.binding.marginTargetPercent}%` : '—'],
        ['Latest budget check', d.latestBudgetCheck.decision || '—'], ['Checked at', time(d.latestBudgetCheck.at)],
        ['Enforced on this instance', b.propagated ? 'yes' : 'not yet']]
        .map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v))))),
  ];
}
