// Cost events: the newest first, with filters (new calls matching them appear at
// the top by themselves), a detail page per event, and CSV export (a Pro feature;
// the API answers 403 on Free).
import { get, query, api } from '../lib/api.js';
import { h, fill, field, select, status, code, time, named } from '../lib/dom.js';
import { usd } from '../lib/money.js';

const SOURCES = [['', 'Any'], ['proxy', 'proxy'], ['sdk', 'sdk'], ['api', 'api'], ['mcp', 'mcp']];
const POLL_MS = 3000;

export async function render(main, ctx) {
  const id = ctx.path.split('/')[2];
  if (id) return detail(main, decodeURIComponent(id), ctx);
  return list(main, ctx);
}

async function list(main, { signal }) {
  const provider = h('input', { type: 'text' });
  const model = h('input', { type: 'text' });
  const key = select([['', 'Any']], '');
  const source = select(SOURCES, '');
  const session = h('input', { type: 'text' });
  const tag = h('input', { type: 'text', placeholder: 'key=value' });
  const msg = status();
  const rows = h('tbody');
  const more = h('button', { type: 'button', hidden: true }, 'Load more');
  const table = h('table', {}, h('caption', {}, 'Cost events, newest first'),
    h('thead', {}, h('tr', {}, ['Time', 'Provider', 'Model', 'Key', 'Tokens in / out', 'Cost', 'Source', ''].map((t) => h('th', { scope: 'col' }, t)))), rows);
  const form = h('form', { class: 'filters' },
    field('Provider', provider), field('Model', model), field('API key', key), field('Source', source),
    field('Session', session), field('Tag', tag),
    h('div', { class: 'buttons' }, h('button', { type: 'submit' }, 'Filter'), h('button', { type: 'button', onclick: exportCsv }, 'Export CSV')));
  fill(main, h('h1', {}, 'Cost events'), form, msg, table, more);

  const params = () => {
    const p = { provider: provider.value.trim(), model: model.value.trim(), apiKeyId: key.value, source: source.value, sessionId: session.value.trim() };
    const t = tag.value.trim();
    if (t.includes('=')) p[`tag.${t.slice(0, t.indexOf('='))}`] = t.slice(t.indexOf('=') + 1);
    return p;
  };
  let cursor = null;
  let shown = params();
  const row = (e) => h('tr', { 'data-id': e.id },
    h('td', {}, time(e.createdAt)), h('td', {}, e.provider), h('td', {}, e.model),
    h('td', {}, e.apiKeyId ? h('a', { href: `/keys/${e.apiKeyId}` }, e.keyName || 'key') : '—'),
    h('td', { class: 'num' }, `${e.inputTokens} / ${e.outputTokens}`), h('td', { class: 'num' }, usd(e.costMicrodollars)),
    h('td', {}, e.source || '—'), h('td', {}, h('a', { href: `/cost-events/${e.id}` }, 'Details')));
  async function load(reset) {
    if (reset) { cursor = null; rows.replaceChildren(); shown = params(); }
    const page = await get(`/api/cost-events${query({ ...shown, limit: 50, cursor: cursor ? JSON.stringify(cursor) : '' })}`, { signal });
    rows.querySelector('td.empty')?.parentElement.remove();
    for (const e of page.data) rows.append(row(e));
    if (!rows.children.length) rows.append(h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No cost events match.')));
    cursor = page.cursor;
    more.hidden = !cursor;
  }
  // New events matching the filters shown go on top as they are recorded.
  async function poll() {
    const page = await get(`/api/cost-events${query({ ...shown, limit: 25 })}`, { signal });
    const have = new Set([...rows.children].map((r) => r.dataset.id));
    const fresh = page.data.filter((e) => !have.has(e.id));
    if (fresh.length) rows.querySelector('td.empty')?.parentElement.remove();
    for (const e of fresh.reverse()) rows.prepend(row(e));
  }
  const timer = setInterval(() => poll().catch(() => {}), POLL_MS);
  signal.addEventListener('abort', () => clearInterval(timer));
  async function exportCsv() {
    msg.textContent = '';
    try {
      const res = await api('GET', `/api/cost-events/export${query(params())}`, undefined, { raw: true });
      const url = URL.createObjectURL(await res.blob());
      const a = h('a', { href: url, download: `cost-events-${new Date().toISOString().slice(0, 10)}.csv` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
      msg.textContent = 'Export downloaded.';
    } catch (err) {
      msg.textContent = err.status === 403 ? 'CSV export needs the Pro plan or above.' : `Export failed: ${err.message}`;
    }
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); load(true).catch((err) => { msg.textContent = err.message; }); });
  more.addEventListener('click', () => load(false));
  try {
    for (const k of (await get('/api/keys?limit=100', { signal })).data) key.append(h('option', { value: k.id }, k.name));
  } catch { /* the filter still works by id-less fields */ }
  await load(true);
}

async function detail(main, id, { signal, title }) {
  const e = (await get(`/api/cost-events/${encodeURIComponent(id)}`, { signal })).data;
  title(`Cost event ${e.model}`);
  const rows = [
    ['Id', code(e.id)], ['Request id', code(e.requestId || '—')], ['Time', time(e.createdAt)], ['Provider', e.provider],
    ['Model', e.model], ['Cost', usd(e.costMicrodollars)], ['Input tokens', e.inputTokens], ['Output tokens', e.outputTokens],
    ['Cached input tokens', e.cachedInputTokens], ['Reasoning tokens', e.reasoningTokens], ['Duration', e.durationMs != null ? `${e.durationMs} ms` : '—'],
    ['API key', e.apiKeyId ? named(e.keyName, e.apiKeyId, `/keys/${e.apiKeyId}`) : '—'], ['Source', e.source || '—'],
    ['Session', e.sessionId || '—'], ['Trace', e.traceId || '—'],
    ['Customer', e.customerId ? h('a', { href: `/customers/${encodeURIComponent(e.customerId)}` }, e.customerId) : '—'],
    ['Tool', e.toolName ? `${e.toolServer || ''} ${e.toolName}` : '—'], ['Budget status', e.budgetStatus || '—'],
    ['Tags', Object.keys(e.tags || {}).length ? Object.entries(e.tags).map(([k, v]) => `${k}=${v}`).join(', ') : '—'],
  ];
  if (e.costBreakdown) rows.push(['Cost breakdown', Object.entries(e.costBreakdown).map(([k, v]) => `${k} ${usd(v)}`).join(', ')]);
  fill(main, h('p', {}, h('a', { href: '/cost-events' }, '← All cost events')), h('h1', {}, `Cost event: ${e.model}`),
    h('dl', { class: 'detail' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])));
}
