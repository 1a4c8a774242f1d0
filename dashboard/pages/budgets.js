// Budgets: the table, the create/edit form (an upsert on entity), reset, delete,
// and the proxy's live velocity state, polled while the page is open.
import { get, post, del } from '../lib/api.js';
import { h, fill, field, select, status, code, time } from '../lib/dom.js';
import { usd, parseUsd, usdInput } from '../lib/money.js';

const TYPES = [['api_key', 'API key'], ['user', 'User'], ['tag', 'Tag (key=value)'], ['customer', 'Customer']];
const POLICIES = [['strict_block', 'Strict block'], ['soft_block', 'Soft block'], ['warn', 'Warn']];
const RESETS = [['', 'Never'], ['daily', 'Daily'], ['weekly', 'Weekly'], ['monthly', 'Monthly']];

export async function render(main, { signal, session }) {
  const msg = status();
  const list = h('div');
  const velocity = new Map();
  const form = budgetForm(session, signal, async (text) => { msg.textContent = text; await refresh(); });
  const newButton = h('button', { type: 'button', onclick: () => form.open(null) }, 'New budget');
  fill(main, h('h1', {}, 'Budgets'), h('p', {}, newButton), form.el, msg, list);

  async function refresh() {
    const budgets = (await get('/api/budgets', { signal })).data;
    fill(list, budgets.length ? budgetTable(budgets, velocity, { edit: form.open, changed: async (text) => { msg.textContent = text; await refresh(); } })
      : h('p', { class: 'empty' }, 'No budgets yet. Create one with “New budget”.'));
  }
  async function pollVelocity() {
    try {
      const v = await get('/api/budgets/velocity-status', { signal });
      velocity.clear();
      for (const s of v.velocityState) velocity.set(s.budgetId, s);
      for (const cell of list.querySelectorAll('[data-velocity]')) fill(cell, velocityText(velocity.get(cell.dataset.velocity), cell.dataset.limit));
    } catch { /* shown as no live state */ }
  }
  await refresh();
  await pollVelocity();
  const timer = setInterval(pollVelocity, 5000);
  signal.addEventListener('abort', () => clearInterval(timer));
}

function velocityText(state, limit) {
  if (state?.breakerOpen) return h('strong', { class: 'bad' }, 'Breaker open until ', time(state.breakerOpenUntil));
  if (state) return `${usd(state.windowSpendMicrodollars)} of ${usd(state.velocityLimitMicrodollars)} per ${state.velocityWindowSeconds}s`;
  return limit ? 'Closed' : '—';
}

function budgetTable(budgets, velocity, { edit, changed }) {
  const row = (b) => {
    const remaining = Math.max(0, b.maxBudgetMicrodollars - b.spendMicrodollars);
    const del1 = h('button', { type: 'button', class: 'danger' }, 'Delete');
    del1.addEventListener('click', async () => {
      if (del1.textContent === 'Delete') { del1.textContent = 'Confirm delete'; return; }
      await del(`/api/budgets/${b.id}`);
      await changed(`Deleted the budget of ${b.entityType} ${b.entityId}.`);
    });
    return h('tr', {},
      h('td', {}, h('span', { class: 'muted' }, b.entityType), ' ', code(b.entityId)),
      h('td', { class: 'num' }, usd(b.maxBudgetMicrodollars)),
      h('td', { class: 'num' }, usd(b.spendMicrodollars)),
      h('td', { class: 'num' }, usd(remaining)),
      h('td', {}, b.policy, b.exactCeiling ? h('br') : null, b.exactCeiling ? h('small', { class: 'muted' }, 'exact ceiling') : null),
      h('td', {}, b.resetInterval || 'never', b.currentPeriodStart ? h('br') : null, b.currentPeriodStart ? time(b.currentPeriodStart) : null),
      h('td', { 'data-velocity': b.id, 'data-limit': b.velocityLimitMicrodollars ?? '' }, velocityText(velocity.get(b.id), b.velocityLimitMicrodollars)),
      h('td', { class: 'row-actions' },
        h('button', { type: 'button', onclick: () => edit(b) }, 'Edit'),
        h('button', { type: 'button', onclick: async () => { await post(`/api/budgets/${b.id}`); await changed(`Reset the spend of ${b.entityType} ${b.entityId}.`); } }, 'Reset'),
        del1));
  };
  return h('table', {}, h('caption', {}, 'Budgets'),
    h('thead', {}, h('tr', {}, ['Entity', 'Limit', 'Spend', 'Remaining', 'Policy', 'Reset', 'Velocity', 'Manage'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, budgets.map(row)));
}

function budgetForm(session, signal, saved) {
  const type = select(TYPES, 'api_key');
  const entity = h('input', { type: 'text', required: true, list: 'entity-options', autocomplete: 'off' });
  const options = h('datalist', { id: 'entity-options' });
  const limit = h('input', { type: 'text', inputmode: 'decimal', required: true, placeholder: '50.00' });
  const policy = select(POLICIES, 'strict_block');
  const reset = select(RESETS, '');
  const exact = h('input', { type: 'checkbox' });
  const thresholds = h('input', { type: 'text', placeholder: '50, 80, 100' });
  const vLimit = h('input', { type: 'text', inputmode: 'decimal' });
  const vWindow = h('input', { type: 'number', min: 10, max: 3600 });
  const vCooldown = h('input', { type: 'number', min: 10, max: 3600 });
  const error = h('p', { role: 'alert', class: 'error' });
  const heading = h('h2', {}, 'New budget');
  const el = h('form', { class: 'panel', hidden: true },
    heading,
    field('Entity type', type), field('Entity', entity, 'API key id, user id, key=value for a tag, or a customer id'), options,
    field('Limit (USD)', limit), field('Policy', policy),
    field('Exact ceiling', exact, 'Strict block only: a call the room left cannot pay in full is sent with its output bound cut to what the room pays for, instead of refused'),
    field('Reset interval', reset),
    field('Alert thresholds (%)', thresholds, 'Comma-separated, ascending'),
    h('fieldset', {}, h('legend', {}, 'Velocity limit (optional)'),
      field('Velocity limit (USD)', vLimit), field('Window (seconds)', vWindow), field('Cooldown (seconds)', vCooldown)),
    error,
    h('div', { class: 'buttons' }, h('button', { type: 'submit' }, 'Save'), h('button', { type: 'button', onclick: () => { el.hidden = true; } }, 'Cancel')));

  async function suggest() {
    const items = [];
    if (type.value === 'user') items.push([session.user.id, session.user.email]);
    if (type.value === 'api_key') {
      try { for (const k of (await get('/api/keys?limit=100', { signal })).data) items.push([k.id, k.name]); } catch { /* no suggestions */ }
    }
    fill(options, items.map(([v, t]) => h('option', { value: v }, t)));
  }
  type.addEventListener('change', suggest);

  el.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    const max = parseUsd(limit.value);
    if (!max) { error.textContent = 'Limit (USD) must be a positive dollar amount, e.g. 50 or 12.50.'; limit.focus(); return; }
    const body = { entityType: type.value, entityId: entity.value.trim(), maxBudgetMicrodollars: max, policy: policy.value, resetInterval: reset.value || null };
    body.exactCeiling = exact.checked && policy.value === 'strict_block';
    if (thresholds.value.trim()) body.thresholdPercentages = thresholds.value.split(',').map((t) => Number(t.trim()));
    if (vLimit.value.trim()) {
      body.velocityLimitMicrodollars = parseUsd(vLimit.value);
      if (vWindow.value) body.velocityWindowSeconds = Number(vWindow.value);
      if (vCooldown.value) body.velocityCooldownSeconds = Number(vCooldown.value);
    } else body.velocityLimitMicrodollars = null;
    try {
      const b = await post('/api/budgets', body);
      el.hidden = true;
      await saved(`Saved the budget of ${b.entityType} ${b.entityId}: ${usd(b.maxBudgetMicrodollars)}.`);
    } catch (err) {
      const issues = err.details?.issues?.map((i) => `${(i.path || []).join('.')}: ${i.message}`).join('; ');
      error.textContent = issues ? `${err.message} (${issues})` : err.message;
    }
  });

  function open(b) {
    el.hidden = false;
    error.textContent = '';
    heading.textContent = b ? 'Edit budget' : 'New budget';
    type.value = b?.entityType || 'api_key';
    type.disabled = !!b;
    entity.value = b?.entityId || '';
    entity.readOnly = !!b;
    limit.value = b ? usdInput(b.maxBudgetMicrodollars) : '';
    policy.value = b?.policy || 'strict_block';
    reset.value = b?.resetInterval || '';
    exact.checked = !!b?.exactCeiling;
    thresholds.value = b?.thresholdPercentages?.join(', ') || '';
    vLimit.value = b?.velocityLimitMicrodollars != null ? usdInput(b.velocityLimitMicrodollars) : '';
    vWindow.value = b?.velocityWindowSeconds ?? '';
    vCooldown.value = b?.velocityCooldownSeconds ?? '';
    suggest();
    (b ? limit : type).focus();
  }
  return { el, open };
}
