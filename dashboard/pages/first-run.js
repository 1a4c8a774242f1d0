// First run: an organization that has never recorded a call is walked to its first
// one. 1. create a spendgate key (its secret is shown here once, and filled into the
// code); 2. optionally store the provider's key in the gateway, so agents carry only
// their spendgate key; 3. copy the official SDK's code, with the proxy's address;
// 4. the page waits for the call and turns into the overview when it lands.
import { get, post } from '../lib/api.js';
import { h, fill, field, select, status, code } from '../lib/dom.js';
import { forgetNames } from '../lib/names.js';
import { SNIPPETS, snippet, reachableProxy } from '../lib/snippets.js';

const POLL_MS = 2000;
const PROVIDERS = [['openai', 'OpenAI'], ['anthropic', 'Anthropic']];

export async function firstRun(main, { signal, session }, done) {
  const proxy = reachableProxy(session.proxyUrl || `${location.protocol}//${location.hostname}:8787`);
  const state = { key: null, stored: new Set(), tab: 'openai-python' };
  const keys = (await get('/api/keys?limit=1', { signal })).data;
  await refreshStored();

  const keyStep = h('li', { class: 'step' });
  const credStep = h('li', { class: 'step' });
  const codeStep = h('li', { class: 'step' });
  const waiting = h('p', { class: 'status waiting', role: 'status' }, 'Waiting for the first call…');
  fill(main, h('h1', {}, 'Welcome to spendgate'),
    h('p', {}, 'No call has gone through this gateway yet. Three steps to the first one, then this page becomes your overview.'),
    h('ol', { class: 'steps' }, keyStep, credStep, codeStep), waiting);

  function drawKey() {
    if (state.key) {
      fill(keyStep, h('h2', {}, '1. Key created ✓'),
        h('p', {}, `Key “${state.key.name}”: `, h('code', { class: 'secret', id: 'raw-key' }, state.key.rawKey)),
        h('p', { class: 'hint' }, 'Shown only on this page: it is filled into the code below. Keep it as you keep a password.'));
      return;
    }
    const name = h('input', { type: 'text', required: true, maxlength: 50, value: 'my-first-agent', autocomplete: 'off' });
    const error = h('p', { role: 'alert', class: 'error' });
    const form = h('form', { class: 'inline' }, field('Key name', name), h('button', { type: 'submit' }, 'Create key'), error);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      error.textContent = '';
      try {
        state.key = (await post('/api/keys', { name: name.value })).data;
        forgetNames();
        drawKey();
        drawCode();
        keyStep.querySelector('#raw-key')?.scrollIntoView({ block: 'nearest' });
      } catch (err) { error.textContent = err.message; }
    });
    fill(keyStep, h('h2', {}, '1. Create a spendgate key'),
      h('p', {}, 'Agents present it on every call; budgets and reports are kept per key.',
        keys.length ? ' (This organization has keys already; their secrets cannot be shown again, so the code below needs a new one or your own.)' : ''),
      form);
  }

  async function refreshStored() {
    try {
      const creds = (await get('/api/provider-credentials', { signal })).data;
      state.stored = new Set(creds.map((c) => c.upstream));
    } catch { /* a role that cannot list them: the code sends the provider key itself */ }
  }

  function drawCred() {
    const provider = select(PROVIDERS, 'openai');
    const secret = h('input', { type: 'password', required: true, autocomplete: 'off', spellcheck: 'false' });
    const msg = status();
    const error = h('p', { role: 'alert', class: 'error' });
    const form = h('form', { class: 'inline' }, field('Provider', provider), field('Provider API key', secret, 'Stored encrypted; never shown again'),
      h('button', { type: 'submit' }, 'Store provider key'), error);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      error.textContent = '';
      try {
        const c = (await post('/api/provider-credentials', { upstream: provider.value, secret: secret.value })).data;
        secret.value = '';
        state.stored.add(c.upstream);
        msg.textContent = `Stored the ${c.upstream} key (${c.secretPrefix}…). Agents now need only their spendgate key.`;
        state.tab = c.upstream === 'anthropic' ? 'anthropic-python' : 'openai-python';
        drawCode();
      } catch (err) { error.textContent = err.status === 403 ? 'Storing provider keys is for admins.' : err.message; }
    });
    const have = [...state.stored];
    fill(credStep, h('h2', {}, '2. Store a provider key (optional)'),
      h('p', {}, 'With the provider key stored here, agents carry only their spendgate key; without it, they send their own provider key and the spendgate key in a header.'),
      have.length ? h('p', {}, `Stored: ${have.join(', ')} ✓`) : null, form, msg);
  }

  function drawCode() {
    const tabs = h('div', { class: 'tabs', role: 'group', 'aria-label': 'SDK' }, SNIPPETS.map(([id, label]) =>
      h('button', { type: 'button', class: 'tab', 'aria-pressed': String(id === state.tab), onclick: () => { state.tab = id; drawCode(); codeStep.querySelector('[aria-pressed="true"]')?.focus(); } }, label)));
    const provider = state.tab.startsWith('anthropic') ? 'anthropic' : 'openai';
    const text = snippet(state.tab, { proxy, key: state.key?.rawKey, stored: state.stored.has(provider) });
    const copied = status();
    const copy = h('button', { type: 'button', onclick: async () => {
      try { await navigator.clipboard.writeText(text); copied.textContent = 'Copied.'; } catch {
        getSelection().selectAllChildren(pre);
        copied.textContent = 'Selected: copy it with your keyboard.';
      }
    } }, 'Copy code');
    const pre = h('pre', { class: 'snippet', id: 'snippet', tabindex: '0', 'aria-label': `${SNIPPETS.find(([id]) => id === state.tab)[1]} code` }, h('code', {}, text));
    fill(codeStep, h('h2', {}, '3. Make the first call'),
      h('p', {}, 'The proxy listens at ', code(proxy), '. Install the SDK (', code(provider === 'openai' ? 'pip install openai' : 'pip install anthropic'), ') and run:'),
      tabs, pre, h('p', {}, copy), copied,
      state.key ? null : h('p', { class: 'hint' }, 'Create a key in step 1 to fill it in.'));
  }

  drawKey();
  drawCred();
  drawCode();
  // Wait for the first event; then the normal overview takes the page.
  await new Promise((resolve, reject) => {
    const timer = setInterval(async () => {
      try {
        const any = await get('/api/cost-events?limit=1', { signal });
        if (any.data.length) { clearInterval(timer); resolve(); }
      } catch (err) {
        if (signal.aborted) { clearInterval(timer); reject(err); }
      }
    }, POLL_MS);
    signal.addEventListener('abort', () => { clearInterval(timer); resolve(); });
  });
  if (!signal.aborted) await done();
}
