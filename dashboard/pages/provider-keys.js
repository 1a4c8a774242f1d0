// Provider keys held by the gateway: an admin stores the organization's key for each
// provider once, and agents get only their spendgate key. Saving a key for an upstream
// that already has one rotates it. Secrets are sent once and never shown again.
import { get, post, del } from '../lib/api.js';
import { h, fill, field, select, status, code, time } from '../lib/dom.js';

const UPSTREAMS = [['openai', 'OpenAI'], ['anthropic', 'Anthropic'], ['gemini', 'Gemini']];

export async function render(main, { signal }) {
  const msg = status();
  const list = h('div');
  const upstream = select(UPSTREAMS, 'openai');
  const secret = h('input', { type: 'password', required: true, maxlength: 4096, autocomplete: 'off', spellcheck: 'false' });
  const name = h('input', { type: 'text', maxlength: 50, autocomplete: 'off' });
  const error = h('p', { role: 'alert', class: 'error' });
  const form = h('form', { class: 'inline' },
    field('Provider', upstream),
    field('API key', secret, 'Stored encrypted; never shown again'),
    field('Name (optional)', name),
    h('button', { type: 'submit' }, 'Save key'), error);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    const body = { upstream: upstream.value, secret: secret.value };
    if (name.value.trim()) body.name = name.value;
    try {
      const c = (await post('/api/provider-credentials', body)).data;
      secret.value = '';
      name.value = '';
      msg.textContent = `Saved the ${c.upstream} key (${c.secretPrefix}…).`;
      await refresh();
    } catch (err) {
      error.textContent = err.message;
    }
  });
  fill(main, h('h1', {}, 'Provider keys'),
    h('p', {}, 'Calls that bring no provider key of their own are forwarded with the key stored here, so an agent needs only its spendgate key: ',
      code('Authorization: Bearer svc_live_sk_…'), ' (or ', code('x-api-key'), ', ', code('x-goog-api-key'), ').'),
    form, msg, list);

  async function refresh() {
    const creds = (await get('/api/provider-credentials', { signal })).data;
    fill(list, creds.length ? h('table', {}, h('caption', {}, 'Stored provider keys'),
      h('thead', {}, h('tr', {}, ['Provider', 'Name', 'Key', 'Updated', 'Manage'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, creds.map((c) => {
        const rotate = h('button', { type: 'button' }, 'Rotate');
        rotate.addEventListener('click', () => {
          upstream.value = c.upstream;
          secret.focus();
          msg.textContent = `Enter the new ${c.upstream} key and save: calls in flight finish with the old one.`;
        });
        const remove = h('button', { type: 'button', class: 'danger' }, 'Delete');
        remove.addEventListener('click', async () => {
          if (remove.textContent === 'Delete') { remove.textContent = 'Confirm delete'; return; }
          await del(`/api/provider-credentials/${c.id}`);
          msg.textContent = `Deleted the ${c.upstream} key.`;
          await refresh();
        });
        return h('tr', {}, h('td', {}, c.upstream), h('td', {}, c.name || '—'), h('td', {}, code(`${c.secretPrefix}…`)),
          h('td', {}, time(c.updatedAt)), h('td', {}, rotate, ' ', remove));
      })))
      : h('p', { class: 'empty' }, 'No provider keys stored yet.'));
  }
  await refresh();
}
