// Pricing: the prices in force for this organization (built in, the operator's
// pricing file, and the organization's own runtime prices, each marked by source),
// the models called without a price in the last 7 days with a button to price each,
// what a call to an unpriced model does (estimate or block), and a form that sets or
// removes a runtime price. Prices are dollars per million tokens on the page and
// integer microdollars per million tokens in the API.
import { get, put, patch, del } from '../lib/api.js';
import { h, fill, field, select, status, code, time } from '../lib/dom.js';
import { parseUsd, usdInput } from '../lib/money.js';

const POLICIES = [['estimate', 'estimate (charge the fallback price, tagged)'], ['block', 'block (refuse the call)']];

/** `$2.5` for 2500000 µ$ per million tokens. */
const perMillion = (micros) => `$${usdInput(micros)}`;

/** The API path of one model's runtime price; a model may contain `/`. */
const pricePath = (provider, model) =>
  `/api/model-prices/${encodeURIComponent(provider)}/${model.split('/').map(encodeURIComponent).join('/')}`;

export async function render(main, { signal, session }) {
  const msg = status();
  const error = h('p', { role: 'alert', class: 'error' });
  const unpricedList = h('div');
  const table = h('div');
  const policy = select(POLICIES, 'estimate');
  const policyForm = h('form', { class: 'inline' }, field('Calls to unpriced models', policy),
    h('button', { type: 'submit' }, 'Save setting'));
  policyForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    try {
      await patch(`/api/orgs/${session.org.id}`, { unpricedModels: policy.value });
      msg.textContent = `Calls to unpriced models: ${policy.value}.`;
    } catch (err) { error.textContent = err.message; }
  });

  const provider = h('input', { type: 'text', required: true, maxlength: 100, autocomplete: 'off', value: 'openai' });
  const model = h('input', { type: 'text', required: true, maxlength: 200, autocomplete: 'off', spellcheck: 'false' });
  const input = h('input', { type: 'text', required: true, inputmode: 'decimal', autocomplete: 'off' });
  const output = h('input', { type: 'text', required: true, inputmode: 'decimal', autocomplete: 'off' });
  const cached = h('input', { type: 'text', inputmode: 'decimal', autocomplete: 'off' });
  const priceForm = h('form', { class: 'inline' },
    field('Provider', provider, 'openai, anthropic, google, or a configured upstream'),
    field('Model', model, 'Exactly as calls send it'),
    field('Input $ per 1M tokens', input), field('Output $ per 1M tokens', output),
    field('Cached input $ per 1M tokens (optional)', cached),
    h('button', { type: 'submit' }, 'Save price'));
  priceForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    const body = { input: parseUsd(input.value), output: parseUsd(output.value) };
    if (cached.value.trim()) body.cachedInput = parseUsd(cached.value);
    if (Object.values(body).some((v) => v === null)) {
      error.textContent = 'Prices are non-negative dollar amounts, such as 2.5 or 0.15.';
      return;
    }
    try {
      const p = (await put(pricePath(provider.value.trim(), model.value), body)).data;
      msg.textContent = `Priced ${p.provider}/${p.model}: ${perMillion(p.input)} in, ${perMillion(p.output)} out per 1M tokens.`;
      for (const f of [model, input, output, cached]) f.value = '';
      await refresh();
    } catch (err) { error.textContent = err.message; }
  });

  fill(main, h('h1', {}, 'Pricing'),
    h('p', {}, 'Proxied calls are charged at these prices. A price set here applies to this organization only, to the exact model name, ahead of the built-in table and the operator\'s pricing file, on every instance within about a second.'),
    policyForm, h('h2', {}, 'Price a model'), priceForm, error, msg,
    h('h2', {}, 'Models seen unpriced'), unpricedList, h('h2', {}, 'Prices in force'), table);

  function priceButton(m) {
    return h('button', { type: 'button', onclick: () => {
      provider.value = m.provider;
      model.value = m.model;
      input.focus();
      msg.textContent = `Enter the prices of ${m.provider}/${m.model} and save.`;
    } }, 'Price it');
  }

  function removeButton(m) {
    const remove = h('button', { type: 'button', class: 'danger' }, 'Remove');
    remove.addEventListener('click', async () => {
      if (remove.textContent === 'Remove') { remove.textContent = 'Confirm remove'; return; }
      try {
        await del(pricePath(m.provider, m.model));
        msg.textContent = `Removed the runtime price of ${m.provider}/${m.model}.`;
        await refresh();
      } catch (err) { error.textContent = err.message; }
    });
    return remove;
  }

  async function refresh() {
    const p = (await get('/api/pricing', { signal })).data;
    policy.value = p.unpricedModels;
    fill(unpricedList, p.unpriced.length ? h('table', {}, h('caption', {}, `Called without a price in the last ${p.windowDays} days`),
      h('thead', {}, h('tr', {}, ['Provider', 'Model', 'Calls', 'Last seen', 'Price'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, p.unpriced.map((m) => h('tr', {}, h('td', {}, m.provider), h('td', {}, code(m.model)),
        h('td', {}, String(m.calls)), h('td', {}, time(m.lastSeen)), h('td', {}, priceButton(m))))))
      : h('p', { class: 'empty' }, `No model was called without a price in the last ${p.windowDays} days.`));
    const rows = [...p.models].sort((a, b) => (a.source === 'runtime' ? 0 : 1) - (b.source === 'runtime' ? 0 : 1));
    fill(table, h('table', {}, h('caption', {}, `${p.models.length} prices, dollars per 1M tokens${p.checkedAt ? `; built-in prices checked ${p.checkedAt}` : ''}`),
      h('thead', {}, h('tr', {}, ['Provider', 'Model', 'Source', 'Input', 'Output', 'Cached input', 'Manage'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows.map((m) => h('tr', {}, h('td', {}, m.provider), h('td', {}, code(m.model)), h('td', {}, m.source),
        h('td', {}, perMillion(m.input)), h('td', {}, perMillion(m.output)), h('td', {}, perMillion(m.cachedInput)),
        h('td', {}, m.source === 'runtime' ? removeButton(m) : '—'))))));
  }
  await refresh();
}
