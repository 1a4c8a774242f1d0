// Margins: revenue against cost per customer with health tiers, and one customer's
// view. Paid tiers only: on Free the API answers 403 and the page says so.
import { get, query } from '../lib/api.js';
import { h, fill, field, status, code } from '../lib/dom.js';
import { usd } from '../lib/money.js';

const TIERS = { healthy: 'Healthy', moderate: 'Moderate', at_risk: 'At risk', critical: 'Critical' };
const pct = (v) => (v == null ? '—' : `${Number(v).toFixed(1)}%`);

export async function render(main, ctx) {
  const customer = ctx.path.split('/')[2];
  const month = h('input', { type: 'month', value: new Date().toISOString().slice(0, 7) });
  const body = h('div');
  const msg = status();
  fill(main, h('h1', {}, customer ? `Margins: ${decodeURIComponent(customer)}` : 'Margins'),
    h('form', { class: 'filters', onsubmit: (e) => { e.preventDefault(); load(); } }, field('Period', month), h('button', { type: 'submit' }, 'Show')), msg, body);
  async function load() {
    msg.textContent = '';
    try {
      if (customer) await one(body, decodeURIComponent(customer), month.value, ctx);
      else await all(body, month.value, ctx);
    } catch (err) {
      if (err.status === 403) fill(body, h('p', { class: 'empty' }, 'Margins need the Pro plan or above.'));
      else if (err.status === 404) fill(body, h('p', { class: 'empty' }, 'No mapping for this customer.'));
      else throw err;
    }
  }
  await load();
}

async function all(body, period, { signal, navigate }) {
  const d = (await get(`/api/margins${query({ period })}`, { signal })).data;
  const s = d.summary;
  fill(body,
    h('section', { class: 'stats' },
      h('div', {}, h('h2', {}, 'Blended margin'), h('p', { class: 'stat' }, pct(s.blendedMarginPercent))),
      h('div', {}, h('h2', {}, 'Revenue'), h('p', { class: 'stat' }, usd(s.totalRevenueMicrodollars))),
      h('div', {}, h('h2', {}, 'Cost'), h('p', { class: 'stat' }, usd(s.totalCostMicrodollars))),
      h('div', {}, h('h2', {}, 'Critical / at risk'), h('p', { class: 'stat' }, `${s.criticalCount} / ${s.atRiskCount}`))),
    h('p', { class: 'muted' }, `Revenue sync: ${s.syncStatus || 'never'}`),
    d.customers.length ? h('table', {}, h('caption', {}, `Customers, ${period}`),
      h('thead', {}, h('tr', {}, ['Customer', 'Tag value', 'Revenue', 'Cost', 'Margin', 'Margin %', 'Health'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, d.customers.map((c) => h('tr', {},
        h('td', {}, h('a', { href: `/margins/${encodeURIComponent(c.tagValue)}` }, c.customerName || c.processorCustomerId)),
        h('td', {}, code(c.tagValue)), h('td', { class: 'num' }, usd(c.revenueMicrodollars)), h('td', { class: 'num' }, usd(c.costMicrodollars)),
        h('td', { class: 'num' }, usd(c.marginMicrodollars)), h('td', { class: 'num' }, pct(c.marginPercent)),
        h('td', {}, h('span', { class: `badge ${c.healthTier}` }, TIERS[c.healthTier] || c.healthTier))))))
      : h('p', { class: 'empty' }, 'No mapped customers for this period.'));
  void navigate;
}

async function one(body, customer, period, { signal, title }) {
  const d = (await get(`/api/margins/${encodeURIComponent(customer)}${query({ period })}`, { signal })).data;
  title(`Margins: ${d.customerName || customer}`);
  fill(body, h('p', {}, h('a', { href: '/margins' }, '← All customers')),
    h('section', { class: 'stats' },
      h('div', {}, h('h2', {}, 'Health'), h('p', { class: 'stat' }, TIERS[d.healthTier] || d.healthTier)),
      h('div', {}, h('h2', {}, 'Margin'), h('p', { class: 'stat' }, pct(d.marginPercent))),
      h('div', {}, h('h2', {}, 'Revenue'), h('p', { class: 'stat' }, usd(d.revenueMicrodollars))),
      h('div', {}, h('h2', {}, 'Cost'), h('p', { class: 'stat' }, usd(d.costMicrodollars)))),
    h('h2', {}, 'Over time'),
    h('table', {}, h('caption', {}, 'Revenue and cost per month'), h('thead', {}, h('tr', {}, ['Period', 'Revenue', 'Cost'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, d.revenueOverTime.map((r) => h('tr', {}, h('td', {}, r.period), h('td', { class: 'num' }, usd(r.revenue)), h('td', { class: 'num' }, usd(r.cost)))))),
    h('h2', {}, 'Models'),
    h('table', {}, h('caption', {}, 'Cost by model'), h('thead', {}, h('tr', {}, ['Model', 'Cost', 'Requests'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, d.modelBreakdown.map((m) => h('tr', {}, h('td', {}, m.model), h('td', { class: 'num' }, usd(m.cost)), h('td', { class: 'num' }, String(m.requestCount)))))));
}
