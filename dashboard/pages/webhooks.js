// Webhooks: endpoints with their event types, create, send a test ping, rotate the
// signing secret (shown once), and each endpoint's recent deliveries.
import { get, post, del } from '../lib/api.js';
import { h, fill, field, select, status, code, time } from '../lib/dom.js';

const EVENT_TYPES = ['cost_event.created', 'budget.threshold.warning', 'budget.threshold.critical', 'budget.exceeded',
  'budget.increased', 'budget.reset', 'request.blocked', 'velocity.exceeded', 'velocity.recovered', 'session.limit_exceeded',
  'tag_budget.exceeded', 'customer_budget.exceeded', 'loop.detected', 'plan_limit.exceeded', 'margin.threshold_crossed',
  'action.created', 'action.approved', 'action.rejected', 'action.expired', 'test.ping'];

export async function render(main, { signal }) {
  const msg = status();
  const secret = h('div');
  const list = h('div');
  const deliveries = h('div');
  const create = createForm(async (wh) => { showSecret(secret, wh.url, wh.signingSecret); await refresh(); });
  fill(main, h('h1', {}, 'Webhooks'), msg, secret, list, deliveries,
    h('details', { class: 'panel' }, h('summary', {}, 'New endpoint'), create));

  // The endpoint whose deliveries are on screen, refreshed every few seconds.
  let watched = null;
  const timer = setInterval(() => { if (watched) showDeliveries(watched).catch(() => {}); }, 3000);
  signal.addEventListener('abort', () => clearInterval(timer));

  async function showDeliveries(wh) {
    watched = wh;
    const d = (await get(`/api/webhooks/${wh.id}/deliveries`, { signal })).data;
    if (watched !== wh) return;
    fill(deliveries, h('section', { 'aria-labelledby': 'del-h' }, h('h2', { id: 'del-h' }, `Deliveries to ${wh.url}`),
      d.length ? h('table', {}, h('caption', {}, 'Most recent 50 deliveries'),
        h('thead', {}, h('tr', {}, ['Created', 'Event', 'Status', 'Attempts', 'Response', 'Last attempt'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, d.map((x) => h('tr', {}, h('td', {}, time(x.createdAt)), h('td', {}, x.eventType),
          h('td', {}, h('span', { class: `badge ${x.status}` }, x.status)), h('td', { class: 'num' }, String(x.attempts)),
          h('td', {}, x.responseStatus != null ? String(x.responseStatus) : '—'), h('td', {}, time(x.lastAttemptAt))))))
        : h('p', { class: 'empty' }, 'No deliveries yet.')));
  }

  async function refresh() {
    const hooks = (await get('/api/webhooks', { signal })).data;
    fill(list, hooks.length ? h('table', {}, h('caption', {}, 'Endpoints'),
      h('thead', {}, h('tr', {}, ['URL', 'Event types', 'Mode', 'Enabled', 'Manage'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, hooks.map((wh) => {
        const remove = h('button', { type: 'button', class: 'danger' }, 'Delete');
        remove.addEventListener('click', async () => {
          if (remove.textContent === 'Delete') { remove.textContent = 'Confirm delete'; return; }
          await del(`/api/webhooks/${wh.id}`);
          msg.textContent = `Deleted ${wh.url}.`;
          if (watched?.id === wh.id) watched = null;
          fill(deliveries);
          await refresh();
        });
        return h('tr', {}, h('td', {}, code(wh.url), wh.description ? h('div', { class: 'muted' }, wh.description) : null),
          h('td', {}, wh.eventTypes.length ? wh.eventTypes.join(', ') : 'all events'), h('td', {}, wh.payloadMode),
          h('td', {}, wh.enabled ? 'yes' : 'no'),
          h('td', { class: 'row-actions' },
            h('button', { type: 'button', onclick: async () => {
              msg.textContent = `Sending a test to ${wh.url}…`;
              const r = await post(`/api/webhooks/${wh.id}/test`);
              msg.textContent = r.success ? `Test delivered (HTTP ${r.statusCode}).`
                : `Test failed${r.statusCode ? ` (HTTP ${r.statusCode})` : ''}: ${r.responsePreview || 'no response'}`;
              await showDeliveries(wh);
            } }, 'Send test'),
            h('button', { type: 'button', onclick: () => showDeliveries(wh) }, 'Deliveries'),
            h('button', { type: 'button', onclick: async () => {
              const r = (await post(`/api/webhooks/${wh.id}/rotate-secret`)).data;
              showSecret(secret, wh.url, r.signingSecret, 'The previous secret stays valid for 24 hours.');
            } }, 'Rotate secret'),
            remove));
      })))
      : h('p', { class: 'empty' }, 'No endpoints yet.'));
  }
  await refresh();
}

function createForm(created) {
  const url = h('input', { type: 'url', required: true, placeholder: 'https://example.com/hooks/spendgate' });
  const description = h('input', { type: 'text', maxlength: 200 });
  const mode = select([['', 'Plan default'], ['full', 'full'], ['thin', 'thin']], '');
  const boxes = EVENT_TYPES.map((t) => h('input', { type: 'checkbox', value: t, id: `ev-${t.replace(/[^a-z]/g, '-')}` }));
  const error = h('p', { role: 'alert', class: 'error' });
  const form = h('form', {}, field('URL', url), field('Description', description),
    field('Payload mode', mode),
    h('fieldset', { class: 'checks' }, h('legend', {}, 'Event types (none checked: all events)'),
      boxes.map((b) => h('span', {}, b, h('label', { for: b.id }, b.value)))),
    error, h('button', { type: 'submit' }, 'Add endpoint'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    const body = { url: url.value.trim(), eventTypes: boxes.filter((b) => b.checked).map((b) => b.value) };
    if (description.value.trim()) body.description = description.value.trim();
    if (mode.value) body.payloadMode = mode.value;
    try {
      const wh = (await post('/api/webhooks', body)).data;
      form.reset();
      await created(wh);
    } catch (err) {
      error.textContent = err.message;
    }
  });
  return form;
}

function showSecret(el, url, secret, note) {
  fill(el, h('section', { class: 'panel once', 'aria-labelledby': 'secret-h' }, h('h2', { id: 'secret-h' }, `Signing secret for ${url}`),
    h('p', {}, 'Shown only this once. ', note || ''), h('p', {}, h('code', { class: 'secret' }, secret))));
}
