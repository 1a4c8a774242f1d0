// Audit log: membership and ownership changes, newest first, filtered by action.
import { get, query } from '../lib/api.js';
import { h, fill, field, status, code, time, named } from '../lib/dom.js';
import { names as loadNames } from '../lib/names.js';

const KNOWN = ['org.created', 'org.deleted', 'org.ownership_transferred', 'org_upgrade_url.updated', 'customer_upgrade_url.updated',
  'invitation.created', 'invitation.accepted', 'invitation.revoked', 'member.role_changed', 'member.removed', 'member.left'];

export async function render(main, { signal, session }) {
  const names = await loadNames(session, { signal });
  const action = h('input', { type: 'text', list: 'audit-actions', autocomplete: 'off', placeholder: 'e.g. invitation.created' });
  const msg = status();
  const rows = h('tbody');
  const more = h('button', { type: 'button', hidden: true }, 'Load more');
  const form = h('form', { class: 'filters' }, field('Action', action), h('datalist', { id: 'audit-actions' }, KNOWN.map((a) => h('option', { value: a }))),
    h('button', { type: 'submit' }, 'Filter'));
  fill(main, h('h1', {}, 'Audit log'), form, msg,
    h('table', {}, h('caption', {}, 'Audit events, newest first'),
      h('thead', {}, h('tr', {}, ['Time', 'Action', 'Actor', 'Resource', 'Details'].map((t) => h('th', { scope: 'col' }, t)))), rows), more);
  let cursor = null;
  async function load(reset) {
    if (reset) { cursor = null; rows.replaceChildren(); }
    const page = await get(`/api/audit-log${query({ action: action.value.trim(), limit: 50, cursor: cursor ? JSON.stringify(cursor) : '' })}`, { signal });
    for (const e of page.data) rows.append(h('tr', {}, h('td', {}, time(e.createdAt)), h('td', {}, e.action), h('td', {}, e.actorId ? named(names.users.get(e.actorId), e.actorId) : '—'),
      h('td', {}, `${e.resourceType} `, resource(e, names)),
      h('td', {}, Object.entries(e.metadata || {}).map(([k, v]) => `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`).join(', ') || '—')));
    if (!rows.children.length) rows.append(h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No audit events match.')));
    cursor = page.cursor;
    more.hidden = !cursor;
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); load(true).catch((err) => { msg.textContent = err.status === 403 ? 'The audit log is for admins.' : err.message; }); });
  more.addEventListener('click', () => load(false));
  try {
    await load(true);
  } catch (err) {
    if (err.status !== 403) throw err;
    msg.textContent = 'The audit log is for admins and owners.';
  }
}

/** A resource by name when it is a member, else its id. */
function resource(e, names) {
  if (!e.resourceId) return '';
  const user = names.users.get(e.resourceId) || names.users.get(`svc_usr_${e.resourceId}`);
  return named(user, e.resourceId);
}
