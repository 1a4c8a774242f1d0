// The app shell: session check, navigation (with the count of actions waiting for
// approval, kept fresh on every page), and a router on `location.pathname` (the
// server answers index.html for every path outside /api and /assets).
import { get, post, query, setUnauthenticatedHandler } from './lib/api.js';
import { h, fill } from './lib/dom.js';

/** Path prefix → [link text, module]; the order is the navigation's. */
const PAGES = [
  ['/', 'Overview', './pages/overview.js'],
  ['/cost-events', 'Cost events', './pages/cost-events.js'],
  ['/budgets', 'Budgets', './pages/budgets.js'],
  ['/actions', 'Actions', './pages/actions.js'],
  ['/webhooks', 'Webhooks', './pages/webhooks.js'],
  ['/keys', 'API keys', './pages/keys.js'],
  ['/provider-keys', 'Provider keys', './pages/provider-keys.js'],
  ['/pricing', 'Pricing', './pages/pricing.js'],
  ['/customers', 'Customers', './pages/customers.js'],
  ['/margins', 'Margins', './pages/margins.js'],
  ['/audit-log', 'Audit log', './pages/audit.js'],
  ['/organization', 'Organization', './pages/organization.js'],
];

const main = document.getElementById('main');
const top = document.getElementById('top');
let session = null;
let current = null; // AbortController of the page on screen
let pending = null; // actions waiting for approval: { count, more }
let pendingTimer = null;
const PENDING_POLL_MS = 4000;

/** The page of a path; `undefined` for a path no page serves. */
function pageFor(path) {
  if (path === '/' || path === '/signin') return PAGES[0];
  return PAGES.find(([p]) => p !== '/' && (path === p || path.startsWith(`${p}/`)));
}

/** Navigates within the app without a reload. */
export function navigate(path, { replace = false } = {}) {
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  route();
}

function renderNav(active) {
  const nav = document.getElementById('nav');
  fill(nav, h('ul', {}, PAGES.map(([path, text]) => h('li', {},
    h('a', { href: path, 'aria-current': active && active[0] === path ? 'page' : null,
      'aria-describedby': path === '/actions' ? 'pending-count' : null }, text),
    path === '/actions' ? h('span', { id: 'pending-count', class: 'count', hidden: true }) : null))));
  showPending();
}

/** The nav's pending-approvals badge ("3 waiting"), hidden at zero. */
function showPending() {
  const badge = document.getElementById('pending-count');
  if (!badge || !pending) return;
  badge.hidden = pending.count === 0;
  badge.textContent = `${pending.count}${pending.more ? '+' : ''}`;
  badge.title = `${badge.textContent} waiting for approval`;
  badge.setAttribute('aria-label', badge.title);
}

async function pollPending() {
  if (!session) return;
  try {
    const page = await get(`/api/actions${query({ status: 'pending', limit: 100 })}`);
    pending = { count: page.data.length, more: !!page.cursor };
    showPending();
  } catch { /* the badge keeps its last count */ }
}

function startPendingPoll() {
  if (pendingTimer) return;
  pollPending();
  pendingTimer = setInterval(pollPending, PENDING_POLL_MS);
}

async function showSignIn() {
  session = null;
  clearInterval(pendingTimer);
  pendingTimer = null;
  pending = null;
  top.hidden = true;
  const next = location.pathname === '/signin' ? new URLSearchParams(location.search).get('next') || '/'
    : location.pathname + location.search;
  if (location.pathname !== '/signin') history.replaceState(null, '', `/signin?next=${encodeURIComponent(next)}`);
  const mod = await import('./pages/signin.js');
  document.title = 'Sign in · spendgate';
  mod.render(main, { next, onSignedIn: () => { session = null; navigate(next.startsWith('/') && !next.startsWith('//') ? next : '/', { replace: true }); } });
}

async function route() {
  if (current) current.abort();
  current = new AbortController();
  const signal = current.signal;
  if (!session) {
    try {
      session = (await get('/api/auth/session')).data;
    } catch {
      return showSignIn();
    }
  }
  if (location.pathname === '/signin') history.replaceState(null, '', '/');
  startPendingPoll();
  const page = pageFor(location.pathname);
  top.hidden = false;
  fill(document.getElementById('who'), `${session.user.email} · ${session.org.name}`);
  renderNav(page);
  if (!page) {
    document.title = 'Page not found · spendgate';
    fill(main, h('h1', {}, 'Page not found'), h('p', {}, 'No dashboard page lives at this address. ', h('a', { href: '/' }, 'Go to the overview'), '.'));
    return;
  }
  document.title = `${page[1]} · spendgate`;
  fill(main, h('p', {}, 'Loading…'));
  try {
    const mod = await import(page[2]);
    if (signal.aborted) return;
    await mod.render(main, { signal, session, path: location.pathname, navigate, title: setTitle });
  } catch (e) {
    if (signal.aborted || e?.name === 'AbortError') return;
    if (e?.status === 401) return;
    fill(main, h('h1', {}, page[1]), h('p', { role: 'alert', class: 'error' }, e?.message || String(e)));
  }
}

function setTitle(text) {
  document.title = `${text} · spendgate`;
}

// Same-origin links route inside the app; everything else behaves as a link does.
document.addEventListener('click', (e) => {
  const a = e.target.closest('a[href]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/api/') || url.pathname.startsWith('/assets/')) return;
  if (url.hash && url.pathname === location.pathname) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
  main.focus();
});

window.addEventListener('popstate', route);

document.getElementById('signout').addEventListener('click', async () => {
  try { await post('/api/auth/logout'); } catch { /* the session is gone either way */ }
  session = null;
  showSignIn();
});

setUnauthenticatedHandler(() => {
  if (session) { session = null; showSignIn(); }
});

route();
