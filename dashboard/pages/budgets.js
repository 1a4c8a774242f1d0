// Budgets: each budget with its usage bar (spend and in-flight holds against the
// limit, thresholds marked), period end and projected exhaustion, its entity by
// name; the create/edit form (an upsert on entity), reset and delete; and what is
// tripped right now (open velocity breakers, refused calls), polled while the page
// is open.
import { get, post, del } from '../lib/api.js';
import { h, fill, field, select, status, time, named } from '../lib/dom.js';
import { usd, parseUsd, usdInput } from '../lib/money.js';
import { names as loadNames, entityName } from '../lib/names.js';
import { usageBar, periodLines, usedShare } from '../lib/budget.js';
import { trippedNow, trippedSection } from '../lib/tripped.js';

const TYPES = [['api_key', 'API key'], ['user', 'User'], ['tag', 'Tag (key=value)'], ['customer', 'Customer']];
const POLICIES = [['strict_block', 'Strict block'], ['soft_block', 'Soft block'], ['warn', 'Warn']];
const RESETS = [['', 'Never'], ['daily', 'Daily'], ['weekly', 'Weekly'], ['monthly', 'Monthly']];
const POLL_MS = 5000;

export async function render(main, { signal, session }) {
  const msg = status();
  const list = h('div');
  const tripped = h('div');
  const velocity = new Map();
  let budgets = [];
  let names = await loadNames(session, { signal });
  const form = budgetForm(session, signal, async (text) => { msg.textContent = text; await refresh(); });
  const newButton = h('button', { type: 'button', onclick: () => form.open(null) }, 'New budget');
  fill(main, h('h1', {}, 'Budgets'), h('p', {}, newButton), form.el, msg, tripped, list);

  async function refresh() {
    budgets = (await get('/api/budgets', { signal })).data;
    names = await loadNames(session, { signal });
    fill(list, budgets.length ? budgetTable(budgets, names, velocity, { edit: form.open, changed: async (text) => { msg.textContent = text; await refresh(); } })
      : h('p', { class: 'empty' }, 'No budgets yet. Create one with “New budget”.'));
  }
  async function poll() {
    try {
      const now = await trippedNow(signal);
      const v = await get('/api/budgets/velocity-status', { signal });
      velocity.clear();
      for (const s of v.velocityState) velocity.set(`${s.entityType}:${s.entityId}`, s);
      for (const cell of list.querySelectorAll('[data-velocity]')) fill(cell, velocityText(velocity.get(cell.dataset.velocity), cell.dataset.limit));
      fill(tripped, trippedSection(now, budgets, names));
    } catch { /* shown as no live state */ }
  }
  await refresh();
  await poll();
  const timer = setInterval(poll, POLL_MS);
  signal.addEventListener('abort', () => clearInterval(timer));
}

function velocityText(state, limit) {
  if (state?.breakerOpen) return h('strong', { class: 'bad' }, 'Breaker open until ', time(state.breakerOpenUntil));
  if (state) return `${usd(state.windowSpendMicrodollars)} of ${usd(state.velocityLimitMicrodollars)} per ${state.velocityWindowSeconds}s`;
  return limit ? 'Closed' : '—';
}

/** The entity of a budget: its kind, then its name (linked to its page) with the id
 * one click away; tags and customers are named by their id. */
function entityCell(b, names) {
  const [kind, name] = entityName(b, names);
  if (b.entityType === 'customer') return [h('span', { class: 'muted' }, kind), ' ', h('a', { href: `/customers/${encodeURIComponent(b.entityId)}` }, b.entityId)];
  if (b.entityType === 'tag') return [h('span', { class: 'muted' }, kind), ' ', h('code', {}, b.entityId)];
  const href = b.entityType === 'api_key' ? `/keys/${b.entityId}` : null;
  return [h('span', { class: 'muted' }, kind), ' ', named(name, b.entityId, name ? href : null)];
}

function budgetTable(budgets, names, velocity, { edit, changed }) {
  const row = (b) => {
    const [, name] = entityName(b, names);
    const who = `${b.entityType} ${name || b.entityId}`;
    const del1 = h('button', { type: 'button', class: 'danger' }, 'Delete');
    del1.addEventListener('click', async () => {
      if (del1.textContent === 'Delete') { del1.textContent = 'Confirm delete'; return; }
      await del(`/api/budgets/${b.id}`);
      await changed(`Deleted the budget of ${who}.`);
    });
    // `data-label`: a phone shows each row as a card, each cell under its header's name.
    return h('tr', { 'data-budget': b.id },
      h('td', {}, entityCell(b, names)),
      h('td', { class: 'num', 'data-label': 'Limit' }, usd(b.maxBudgetMicrodollars)),
      h('td', { class: 'usage-cell' }, usageBar(b, names), periodLines(b)),
      h('td', { 'data-label': 'Reset' }, b.resetInterval || 'never'),
      h('td', { 'data-label': 'Policy' }, b.policy, b.exactCeiling ? h('br') : null, b.exactCeiling ? h('small', { class: 'muted' }, 'exact ceiling') : null),
      h('td', { 'data-label': 'Velocity', 'data-velocity': `${b.entityType}:${b.entityId}`, 'data-limit': b.velocityLimitMicrodollars ?? '' },
        velocityText(velocity.get(`${b.entityType}:${b.entityId}`), b.velocityLimitMicrodollars)),
      h('td', { class: 'row-actions' },
        h('button', { type: 'button', onclick: () => edit(b) }, 'Edit'),
        h('button', { type: 'button', onclick: async () => { await post(`/api/budgets/${b.id}`); await changed(`Reset the spend of ${who}.`); } }, 'Reset'),
        del1));
  };
  return h('table', { class: 'budgets' }, h('caption', {}, 'Budgets, nearest their limit first'),
    h('thead', {}, h('tr', {}, ['Entity', 'Limit', 'Used', 'Reset', 'Policy', 'Velocity', 'Manage'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, budgets.slice().sort((x, y) => usedShare(y) - usedShare(x)).map(row)));
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
    field('Entity type', type), field('Entity', entity, 'An API key’s name, a member’s email, key=value for a tag, or a customer id'), options,
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
    const n = await loadNames(session, { signal });
    if (type.value === 'user') for (const [id, email] of n.users) items.push([id, email]);
    if (type.value === 'api_key') for (const [id, name] of n.keys) items.push([id, name]);
    fill(options, items.map(([v, t]) => h('option', { value: v }, t)));
  }
  type.addEventListener('change', suggest);

  el.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    const max = parseUsd(limit.value);
    if (!max) { error.textContent = 'Limit (USD) must be a positive dollar amount, e.g. 50 or 12.50.'; limit.focus(); return; }
    const body = { entityType: type.value, entityId: await entityIdOf(type.value, entity.value.trim()), maxBudgetMicrodollars: max, policy: policy.value, resetInterval: reset.value || null };
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
      await saved(`Saved the budget of ${b.entityType} ${b.entityName || b.entityId}: ${usd(b.maxBudgetMicrodollars)}.`);
    } catch (err) {
      const issues = err.details?.issues?.map((i) => `${(i.path || []).join('.')}: ${i.message}`).join('; ');
      error.textContent = issues ? `${err.message} (${issues})` : err.message;
    }
  });

  // A key's name or a member's email stands for its id when exactly one has it.
  async function entityIdOf(kind, text) {
    const n = await loadNames(session, { signal });
    const pairs = kind === 'api_key' ? n.keys : kind === 'user' ? n.users : new Map();
    const hits = [...pairs].filter(([id, name]) => name === text && id !== text);
    return hits.length === 1 ? hits[0][0] : text;
  }

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
