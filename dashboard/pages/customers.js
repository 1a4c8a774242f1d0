// Customers: each binding's plan and cap, the spend of its customer budget, and
// what is left. The proxy's unit-economics endpoint needs an API key, so the
// figures here come from the session endpoints: bindings and budgets.
import { get, post } from '../lib/api.js';
import { h, fill, status, code } from '../lib/dom.js';
import { usd, percent } from '../lib/money.js';

const TRANSITIONS = { active: [['suspend', 'Suspend'], ['archive', 'Archive']], suspended: [['reactivate', 'Reactivate'], ['archive', 'Archive']], archived: [['reactivate', 'Reactivate']] };

export async function render(main, { signal }) {
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
        return h('tr', {}, h('td', {}, code(c.customerId)), h('td', {}, c.planRef),
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
