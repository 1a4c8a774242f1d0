// Names for ids: API keys by name and users by email, read from the public list
// endpoints (`/api/keys`, the organization's members) and kept for a short while,
// so every page shows people's names and keeps the ids one click away.
import { get, query } from './api.js';

const TTL_MS = 30000;
let cached = null; // { at, orgId, keys: Map, users: Map }

async function all(path, signal) {
  const out = [];
  let cursor = null;
  do {
    const page = await get(`${path}${query({ limit: 100, cursor: cursor ? JSON.stringify(cursor) : '' })}`, { signal });
    out.push(...page.data);
    cursor = page.cursor;
  } while (cursor && out.length < 2000);
  return out;
}

/** The organization's key names and member emails; members stay unknown to a role
 * that may not list them (viewers), whose pages then show user ids. */
export async function names(session, { signal, fresh = false } = {}) {
  const orgId = session.org.id;
  if (!fresh && cached && cached.orgId === orgId && Date.now() - cached.at < TTL_MS) return cached;
  const [keys, members] = await Promise.all([
    all('/api/keys', signal).catch(() => []),
    all(`/api/orgs/${orgId}/members`, signal).catch(() => []),
  ]);
  const users = new Map(members.map((m) => [m.userId || m.id, m.email]));
  users.set(session.user.id, session.user.email);
  cached = { at: Date.now(), orgId, keys: new Map(keys.map((k) => [k.id, k.name])), users, keyList: keys };
  return cached;
}

/** Forgets the cache (after a key is created or revoked). */
export function forgetNames() {
  cached = null;
}

/** A budget's entity as a person reads it: `[kind, name or null]`. */
export function entityName(b, n) {
  switch (b.entityType) {
    case 'api_key': return ['API key', b.entityName || n?.keys.get(b.entityId) || null];
    case 'user': return ['User', b.entityName || n?.users.get(b.entityId) || null];
    case 'tag': return ['Tag', null];
    case 'customer': return ['Customer', null];
    default: return [b.entityType, null];
  }
}
