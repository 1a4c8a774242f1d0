// Organization: its plan, members and invitations; admins invite and revoke.
import { get, post, del } from '../lib/api.js';
import { h, fill, field, select, status, code, time } from '../lib/dom.js';

const ROLES = [['member', 'member'], ['viewer', 'viewer'], ['admin', 'admin']];

export async function render(main, { signal, session }) {
  const orgId = session.org.id;
  const msg = status();
  const members = h('div');
  const invites = h('div');
  const email = h('input', { type: 'email', required: true });
  const role = select(ROLES, 'member');
  const token = h('div');
  const form = h('form', { class: 'inline' }, field('Invite email', email), field('Role', role), h('button', { type: 'submit' }, 'Invite'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const inv = (await post(`/api/orgs/${orgId}/invitations`, { email: email.value, role: role.value })).data;
      email.value = '';
      fill(token, h('p', { class: 'panel once' }, `Invitation for ${inv.email}: send them this token (shown once) `, code(inv.token || '')));
      await refresh();
    } catch (err) { msg.textContent = err.message; }
  });
  const org = (await get(`/api/orgs/${orgId}`, { signal })).data;
  fill(main, h('h1', {}, `Organization: ${org.name}`),
    h('dl', { class: 'detail' }, h('dt', {}, 'Plan'), h('dd', {}, org.plan), h('dt', {}, 'Your role'), h('dd', {}, session.role), h('dt', {}, 'Id'), h('dd', {}, code(org.id))),
    msg, h('h2', {}, 'Members'), members, h('h2', {}, 'Invitations'), form, token, invites);

  async function refresh() {
    const m = (await get(`/api/orgs/${orgId}/members`, { signal })).data;
    fill(members, h('table', {}, h('caption', {}, 'Members'), h('thead', {}, h('tr', {}, ['Email', 'Name', 'Role', 'Joined'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, m.map((x) => h('tr', {}, h('td', {}, x.email), h('td', {}, x.name || '—'), h('td', {}, x.role), h('td', {}, time(x.joinedAt)))))));
    let inv = [];
    try { inv = (await get(`/api/orgs/${orgId}/invitations`, { signal })).data; } catch (err) { if (err.status !== 403) throw err; }
    fill(invites, inv.length ? h('table', {}, h('caption', {}, 'Invitations'),
      h('thead', {}, h('tr', {}, ['Email', 'Role', 'Status', 'Expires', 'Manage'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, inv.map((x) => h('tr', {}, h('td', {}, x.email), h('td', {}, x.role), h('td', {}, x.status), h('td', {}, time(x.expiresAt)),
        h('td', {}, x.status === 'pending' ? h('button', { type: 'button', class: 'danger', onclick: async () => {
          await del(`/api/orgs/${orgId}/invitations/${x.id}`);
          msg.textContent = `Revoked the invitation of ${x.email}.`;
          await refresh();
        } }, 'Revoke') : '—')))))
      : h('p', { class: 'empty' }, 'No invitations.'));
  }
  await refresh();
}
