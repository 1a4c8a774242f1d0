// API keys: create (the raw key is shown once, here, and kept nowhere), list and
// revoke; each key's own page is pages/key.js.
import { get, post, del } from '../lib/api.js';
import { h, fill, field, status, code, time, copyId } from '../lib/dom.js';
import { forgetNames } from '../lib/names.js';

export async function render(main, ctx) {
  const id = ctx.path.split('/')[2];
  if (id) return (await import('./key.js')).render(main, { ...ctx, id: decodeURIComponent(id) });
  return list(main, ctx);
}

async function list(main, { signal }) {
  const msg = status();
  const list = h('div');
  const reveal = h('div');
  const name = h('input', { type: 'text', required: true, maxlength: 50, autocomplete: 'off' });
  const storedOnly = h('input', { type: 'checkbox' });
  const error = h('p', { role: 'alert', class: 'error' });
  const form = h('form', { class: 'inline' }, field('Name', name),
    field('Stored provider keys only', storedOnly, 'Refuse calls that bring their own provider key'),
    h('button', { type: 'submit' }, 'Create key'), error);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    try {
      const k = (await post('/api/keys', { name: name.value, requireStoredCredentials: storedOnly.checked })).data;
      name.value = '';
      storedOnly.checked = false;
      showOnce(reveal, k);
      forgetNames();
      await refresh();
    } catch (err) {
      error.textContent = err.message;
    }
  });
  fill(main, h('h1', {}, 'API keys'), form, reveal, msg, list);

  async function refresh() {
    const keys = (await get('/api/keys?limit=100', { signal })).data;
    fill(list, keys.length ? h('table', {}, h('caption', {}, 'Active keys'),
      h('thead', {}, h('tr', {}, ['Name', 'Key', 'Id', 'Created', 'Last used', 'Manage'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, keys.map((k) => {
        const revoke = h('button', { type: 'button', class: 'danger' }, 'Revoke');
        revoke.addEventListener('click', async () => {
          if (revoke.textContent === 'Revoke') { revoke.textContent = 'Confirm revoke'; return; }
          await del(`/api/keys/${k.id}`);
          forgetNames();
          msg.textContent = `Revoked ${k.name}.`;
          await refresh();
        });
        return h('tr', {}, h('td', {}, h('a', { href: `/keys/${k.id}` }, k.name), k.requireStoredCredentials ? ' (stored provider keys only)' : ''),
          h('td', {}, code(`${k.keyPrefix}…`)), h('td', {}, copyId(k.id, `the id of ${k.name}:`)),
          h('td', {}, time(k.createdAt)), h('td', {}, k.lastUsedAt ? time(k.lastUsedAt) : 'never'), h('td', {}, revoke));
      })))
      : h('p', { class: 'empty' }, 'No keys yet.'));
  }
  await refresh();
}

function showOnce(reveal, k) {
  const copied = status();
  const copy = h('button', { type: 'button' }, 'Copy');
  const raw = h('code', { class: 'secret', id: 'raw-key' }, k.rawKey);
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(k.rawKey);
      copied.textContent = 'Copied.';
    } catch {
      getSelection().selectAllChildren(raw);
      copied.textContent = 'Select and copy the key by hand.';
    }
  });
  fill(reveal, h('section', { class: 'panel once', 'aria-labelledby': 'once-h' },
    h('h2', { id: 'once-h' }, `Key “${k.name}” created`),
    h('p', {}, 'Copy it now: it is shown only this once and cannot be recovered.'),
    h('p', {}, raw, ' ', copy), copied));
  copy.focus();
}
