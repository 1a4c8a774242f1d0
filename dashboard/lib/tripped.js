// What blocks calls right now: velocity breakers that are open (the proxy's live
// state, `GET /api/budgets/velocity-status`) and the calls refused in the last hour
// (denial records: cost events with `budgetStatus: denied`), by key and session, so
// a session that hit its session limit shows as the session being refused.
import { get, query } from './api.js';
import { h, time } from './dom.js';
import { usd } from './money.js';
import { entityName } from './names.js';

const HOUR_MS = 3600000;

/** `{ breakers, refused }` as of now. */
export async function trippedNow(signal) {
  const [velocity, denied] = await Promise.all([
    get('/api/budgets/velocity-status', { signal }).catch(() => ({ velocityState: [] })),
    get(`/api/cost-events${query({ budgetStatus: 'denied', limit: 100 })}`, { signal }),
  ]);
  const since = Date.now() - HOUR_MS;
  const groups = new Map();
  for (const e of denied.data.filter((x) => Date.parse(x.createdAt) >= since)) {
    const k = `${e.apiKeyId || ''}\u0000${e.sessionId || ''}`;
    const g = groups.get(k) || { keyId: e.apiKeyId, keyName: e.keyName, sessionId: e.sessionId, count: 0, last: e.createdAt };
    g.count += 1;
    if (e.createdAt > g.last) g.last = e.createdAt;
    groups.set(k, g);
  }
  return { breakers: velocity.velocityState.filter((v) => v.breakerOpen), refused: [...groups.values()] };
}

/** The section: one line per open breaker and per refused key/session. */
export function trippedSection({ breakers, refused }, budgets, names) {
  // The proxy names a budget by its entity (its budget id is the bare UUID).
  const byEntity = new Map(budgets.map((b) => [`${b.entityType}:${b.entityId}`, b]));
  const items = [
    ...breakers.map((v) => {
      const b = byEntity.get(`${v.entityType}:${v.entityId}`) || { entityType: v.entityType, entityId: v.entityId };
      const [kind, name] = entityName(b, names);
      return h('li', { class: 'tripped-breaker' }, h('strong', { class: 'bad' }, 'Velocity breaker open'), ': ',
        `${kind} ${name || v.entityId}`, ` spent ${usd(v.windowSpendMicrodollars)} of ${usd(v.velocityLimitMicrodollars)} per ${v.velocityWindowSeconds} s; calls are refused until `,
        time(v.breakerOpenUntil), '.');
    }),
    ...refused.map((g) => h('li', { class: 'tripped-refused' }, h('strong', {}, `${g.count} call${g.count === 1 ? '' : 's'} refused`),
      g.keyId ? [' for key ', h('a', { href: `/keys/${g.keyId}` }, g.keyName || g.keyId)] : null,
      g.sessionId ? [' in session ', h('code', {}, g.sessionId)] : null, ', last at ', time(g.last), '.')),
  ];
  return h('section', { 'aria-labelledby': 'tripped-h' }, h('h2', { id: 'tripped-h' }, 'Tripped right now'),
    items.length ? h('ul', { class: 'tripped' }, items)
      : h('p', { class: 'empty' }, 'No velocity breaker is open and no call was refused in the last hour.'));
}
