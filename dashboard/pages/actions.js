// Actions: agents' requests waiting for a human. Pending ones are polled every two
// seconds, so new requests appear by themselves; a decision updates the row in
// place. The history below is filtered by status.
import { get, post, query } from '../lib/api.js';
import { h, fill, field, select, status, code, time, named } from '../lib/dom.js';
import { usd } from '../lib/money.js';
import { names as loadNames, entityName } from '../lib/names.js';

const STATUSES = ['pending', 'approved', 'rejected', 'expired', 'executing', 'executed', 'failed'];

export async function render(main, { signal, session }) {
  const names = await loadNames(session, { signal });
  const msg = status();
  const pending = h('div', { class: 'cards', 'aria-live': 'polite' });
  const filter = select([['', 'All'], ...STATUSES.map((s) => [s, s])], '');
  const history = h('div');
  const decided = new Map(); // actions decided here, kept on screen with their new status
  const cards = new Map();
  fill(main, h('h1', {}, 'Actions'), msg,
    h('section', { 'aria-labelledby': 'pending-h' }, h('h2', { id: 'pending-h' }, 'Pending approval'), pending),
    h('section', { 'aria-labelledby': 'history-h' }, h('h2', { id: 'history-h' }, 'History'),
      h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, field('Status', filter)), history));
  filter.addEventListener('change', () => poll());

  async function decide(action, verb) {
    try {
      const res = (await post(`/api/actions/${action.id}/${verb}`)).data;
      decided.set(action.id, { ...action, status: res.status });
      msg.textContent = `Action ${action.actionType} of ${action.agentId} ${res.status}.`;
    } catch (err) {
      msg.textContent = `Could not ${verb} the action: ${err.message}`;
      decided.set(action.id, { ...action, status: err.code === 'action_expired' ? 'expired' : action.status });
    }
    await poll();
  }

  function card(a) {
    const isPending = a.status === 'pending';
    return h('article', { class: 'card', 'aria-label': `${a.actionType} from ${a.agentId}` },
      h('h3', {}, a.actionType, ' ', h('span', { class: `badge ${a.status}` }, a.status)),
      h('dl', {},
        h('dt', {}, 'Agent'), h('dd', {}, code(a.agentId)),
        h('dt', {}, 'Requested'), h('dd', {}, time(a.createdAt)),
        h('dt', {}, 'Expires'), h('dd', {}, a.expiresAt ? time(a.expiresAt) : 'never')),
      readablePayload(a, names),
      isPending ? h('div', { class: 'buttons' },
        h('button', { type: 'button', class: 'approve', onclick: () => decide(a, 'approve') }, 'Approve'),
        h('button', { type: 'button', class: 'danger', onclick: () => decide(a, 'reject') }, 'Reject')) : null);
  }

  async function poll() {
    const [open, past] = await Promise.all([
      get(`/api/actions${query({ status: 'pending', limit: 100 })}`, { signal }),
      get(`/api/actions${query({ status: filter.value, limit: 50 })}`, { signal }),
    ]);
    const shown = [...open.data.filter((a) => !decided.has(a.id)), ...decided.values()]
      .sort((a, b) => (a.createdAt < b.createdAt ? 1 : -1));
    // Rebuild only what changed, so focus stays on an untouched card's buttons.
    const key = (a) => `${a.id}:${a.status}`;
    const wanted = new Set(shown.map(key));
    for (const [k, el] of cards) if (!wanted.has(k)) { el.remove(); cards.delete(k); }
    if (!shown.length) fill(pending, h('p', { class: 'empty' }, 'Nothing is waiting for approval.'));
    else {
      pending.querySelector('.empty')?.remove();
      shown.forEach((a, i) => {
        const el = cards.get(key(a)) || card(a);
        cards.set(key(a), el);
        if (pending.children[i] !== el) pending.insertBefore(el, pending.children[i] || null);
      });
    }
    fill(history, past.data.length ? h('table', {}, h('caption', {}, 'Actions'),
      h('thead', {}, h('tr', {}, ['Requested', 'Agent', 'Type', 'Status', 'Decided by', 'Result'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, past.data.map((a) => h('tr', {},
        h('td', {}, time(a.createdAt)), h('td', {}, code(a.agentId)), h('td', {}, a.actionType),
        h('td', {}, h('span', { class: `badge ${a.status}` }, a.status)),
        h('td', {}, decidedBy(a, names)),
        h('td', {}, a.errorMessage || (a.result ? JSON.stringify(a.result) : '—'))))))
      : h('p', { class: 'empty' }, 'No actions with this status.'));
  }

  await poll();
  const timer = setInterval(() => poll().catch(() => {}), 2000);
  signal.addEventListener('abort', () => clearInterval(timer));
}

/** Who decided: the member's email (their id one click away), else the id. */
function decidedBy(a, names) {
  const id = a.approvedBy || a.rejectedBy;
  if (!id) return '—';
  return named(names.users.get(id), id);
}

/** The payload as a person reads it: a sentence for budget increases, else its
 * fields one per line. */
function readablePayload(a, names) {
  const p = a.payload || {};
  if (a.actionType === 'budget_increase') {
    const [, name] = entityName({ entityType: p.entityType, entityId: String(p.entityId) }, names);
    return h('p', { class: 'payload' }, `Raise the ${p.entityType} budget of `, named(name, String(p.entityId)),
      ` by ${usd(p.requestedAmountMicrodollars)} (limit ${usd(p.currentLimitMicrodollars)}, spent ${usd(p.currentSpendMicrodollars)})`,
      p.reason ? `: “${p.reason}”` : '.');
  }
  const entries = Object.entries(p);
  if (!entries.length) return h('p', { class: 'payload muted' }, 'No payload.');
  return h('dl', { class: 'payload' }, entries.map(([k, v]) => [h('dt', {}, k),
    h('dd', {}, typeof v === 'object' && v !== null ? h('pre', {}, JSON.stringify(v, null, 2)) : String(v))]));
}
