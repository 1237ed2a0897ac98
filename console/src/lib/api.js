// Same-origin calls to suanlid's documented API (docs/api/openapi.yaml).
// The session cookie travels by itself (credentials: 'same-origin'); every
// change is JSON, which is what the server asks of a cookie-authenticated
// request. Errors reject with ApiError, whose message is the server's own
// (it names the way out) and is shown to the user as is.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

// Listeners told when any call answers 401 (the session ended): the layout
// returns to the login page.
const unauthListeners = new Set();
export function onUnauthenticated(fn) {
  unauthListeners.add(fn);
  return () => unauthListeners.delete(fn);
}

const GET_TIMEOUT_MS = 10000;

function query(q) {
  if (!q) return '';
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === null || v === '') continue;
    p.set(k, String(v));
  }
  const s = p.toString();
  return s ? '?' + s : '';
}

function newKey() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  return Date.now().toString(36) + Math.random().toString(36).slice(2);
}

async function request(method, path, body, q, opts = {}) {
  const headers = { Accept: 'application/json' };
  const init = { method, credentials: 'same-origin', headers };
  if (method !== 'GET' && method !== 'HEAD') {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body === undefined ? {} : body);
    if (method === 'POST' && opts.idempotent !== false) headers['Idempotency-Key'] = opts.key || newKey();
  }
  if (method === 'DELETE') delete init.body;
  let res;
  // After a network error (a dropped connection, a network change under
  // way) a GET is tried again, and so is a POST with an Idempotency-Key:
  // if the first one arrived, the server answers the retry with the stored
  // answer instead of doing it twice. Other changes are not retried.
  const retry = method === 'GET' || (method === 'POST' && headers['Idempotency-Key']);
  for (let attempt = 0; ; attempt++) {
    // a GET that has no answer in 10 s is given up and tried again (a
    // connection stuck in a network change never answers)
    const ctl = method === 'GET' && typeof AbortController !== 'undefined' ? new AbortController() : null;
    const timer = ctl ? setTimeout(() => ctl.abort(), GET_TIMEOUT_MS) : null;
    try {
      res = await fetch(path + query(q), ctl ? { ...init, signal: ctl.signal } : init);
      clearTimeout(timer);
      break;
    } catch (e) {
      clearTimeout(timer);
      if (!retry || attempt >= 3) throw new ApiError(0, 'network', 'cannot reach the server: check the connection and try again');
      await new Promise((r) => setTimeout(r, 300 * (attempt + 1)));
    }
  }
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch (e) {
      data = null;
    }
  }
  if (!res.ok) {
    const err = data && data.error ? data.error : null;
    const e = new ApiError(res.status, err ? err.code : 'http_' + res.status,
      err && err.message ? err.message : `the server answered ${res.status} ${res.statusText}`);
    if (res.status === 401 && !opts.quiet401) for (const fn of unauthListeners) fn(e);
    throw e;
  }
  return data;
}

// Pages through a list route and returns all its items (up to max).
async function all(path, q = {}, max = 5000) {
  const items = [];
  let cursor = null;
  for (;;) {
    const page = await request('GET', path, undefined, { ...q, limit: q.limit || 500, cursor });
    items.push(...(page.items || []));
    cursor = page.next_cursor;
    if (!cursor || items.length >= max || !(page.items || []).length) break;
  }
  return items;
}

export const api = {
  get: (path, q, opts) => request('GET', path, undefined, q, opts),
  post: (path, body, opts) => request('POST', path, body, undefined, opts),
  patch: (path, body, opts) => request('PATCH', path, body, undefined, opts),
  put: (path, body, opts) => request('PUT', path, body, undefined, opts),
  del: (path, opts) => request('DELETE', path, undefined, undefined, opts),
  all,
};
