// The latest calls, live: the newest cost events (optionally of one key or one
// customer), polled every few seconds; new ones slide in at the top without a
// reload, and rows already shown stay (so does the keyboard focus on them).
import { get, query } from './api.js';
import { h, fill, time } from './dom.js';
import { usd } from './money.js';

const POLL_MS = 3000;

function row(e) {
  return h('tr', { 'data-id': e.id },
    h('td', {}, time(e.createdAt)),
    h('td', {}, e.apiKeyId ? h('a', { href: `/keys/${e.apiKeyId}` }, e.keyName || 'key') : '—'),
    h('td', {}, e.model),
    h('td', { class: 'num' }, usd(e.costMicrodollars)),
    h('td', {}, e.budgetStatus === 'denied' ? h('span', { class: 'badge rejected' }, 'refused') : (e.customerId ? h('a', { href: `/customers/${encodeURIComponent(e.customerId)}` }, e.customerId) : '—')),
    h('td', {}, h('a', { href: `/cost-events/${e.id}`, 'aria-label': `Details of the ${e.model} call` }, 'Details')));
}

/** `{ el, start }`: the section, and `start(signal)` to load and keep polling. */
export function recentCalls({ filter = {}, limit = 10, title = 'Recent calls' } = {}) {
  const rows = h('tbody');
  const empty = h('p', { class: 'empty' }, 'No calls yet.');
  const tableEl = h('table', { hidden: true }, h('caption', {}, `${title}, newest first; new calls appear by themselves`),
    h('thead', {}, h('tr', {}, ['Time', 'Key', 'Model', 'Cost', 'Customer / status', ''].map((t) => h('th', { scope: 'col' }, t)))), rows);
  const el = h('section', { 'aria-labelledby': 'recent-h' }, h('h2', { id: 'recent-h' }, title), empty, tableEl);
  async function poll(signal) {
    const page = await get(`/api/cost-events${query({ ...filter, limit })}`, { signal });
    const shown = new Set([...rows.children].map((r) => r.dataset.id));
    const fresh = page.data.filter((e) => !shown.has(e.id));
    if (!shown.size) fill(rows, page.data.map(row));
    else for (const e of fresh.reverse()) rows.prepend(row(e));
    while (rows.children.length > limit) rows.lastElementChild.remove();
    tableEl.hidden = !rows.children.length;
    empty.hidden = !tableEl.hidden;
  }
  async function start(signal) {
    await poll(signal);
    const timer = setInterval(() => poll(signal).catch(() => {}), POLL_MS);
    signal.addEventListener('abort', () => clearInterval(timer));
  }
  return { el, start };
}
