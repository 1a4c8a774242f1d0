// The public JSON API, same origin, with the session cookie. Browsers add `Origin`
// to writes, which the server's same-origin rule checks.

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code || '';
    this.details = body?.error?.details;
  }
}

let onUnauthenticated = () => {};

/** Called on any 401 (the session ended): the app shows the sign-in page. */
export function setUnauthenticatedHandler(fn) {
  onUnauthenticated = fn;
}

export async function api(method, path, body, { signal, raw } = {}) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' }, signal };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (raw && res.ok) return res;
  const text = await res.text();
  // The page that asked was left while the answer arrived: its continuation must not
  // run (it would draw over the page now shown), as if the fetch itself was aborted.
  signal?.throwIfAborted();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (!res.ok) {
    if (res.status === 401 && !path.startsWith('/api/auth/login')) onUnauthenticated();
    throw new ApiError(res.status, json);
  }
  return json;
}

export const get = (path, opts) => api('GET', path, undefined, opts);
export const post = (path, body, opts) => api('POST', path, body, opts);
export const patch = (path, body, opts) => api('PATCH', path, body, opts);
export const put = (path, body, opts) => api('PUT', path, body, opts);
export const del = (path, opts) => api('DELETE', path, undefined, opts);

/** A query string from an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}
