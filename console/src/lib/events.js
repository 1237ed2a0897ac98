// Live updates: one shared EventSource on GET /v1/events/stream for the
// whole page. onStream(type, fn) subscribes to 'instance', 'event' or
// 'balance' (the data parsed from JSON) and returns the unsubscribe.
// onStream('status', fn) hears 'live' or 'polling'.
//
// When the stream fails (an older suanlid without the route, a proxy that
// buffers, a dropped network) the same subscribers are fed by polling the
// documented JSON routes every 10 s instead, and the stream is tried again
// every minute.
import { api } from './api.js';

const POLL_MS = 10000;
const RETRY_MS = 60000;
const subs = new Map(); // type -> Set(fn)
let es = null;
let status = 'idle';
let pollTimer = null;
let retryTimer = null;
let errorsInRow = 0;

function emit(type, data) {
  const set = subs.get(type);
  if (!set) return;
  for (const fn of [...set]) {
    try {
      fn(data);
    } catch (e) {
      console.warn('stream subscriber failed', e);
    }
  }
}

function setStatus(s) {
  if (status === s) return;
  status = s;
  emit('status', s);
}

export function streamStatus() {
  return status;
}

function count() {
  let n = 0;
  for (const [k, set] of subs) if (k !== 'status') n += set.size;
  return n;
}

function open() {
  if (es || typeof EventSource === 'undefined') {
    if (!es) startPolling();
    return;
  }
  clearTimeout(retryTimer);
  retryTimer = null;
  es = new EventSource('/v1/events/stream', { withCredentials: true });
  es.onopen = () => {
    errorsInRow = 0;
    stopPolling();
    setStatus('live');
  };
  for (const type of ['instance', 'event', 'balance']) {
    es.addEventListener(type, (ev) => {
      let data;
      try {
        data = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      if (type === 'instance' && data && data.id) lastInstances.set(data.id, JSON.stringify(data));
      if (type === 'balance' && data) lastBalance = data.balance_micros;
      if (type === 'event' && data && data.seq > lastSeq) lastSeq = data.seq;
      emit(type, data);
    });
  }
  es.onerror = () => {
    errorsInRow++;
    // CLOSED: the server refused the stream (no route, not logged in): the
    // browser will not retry by itself. Two errors in a row while
    // reconnecting: the network is down or a proxy is in the way.
    if (es && (es.readyState === EventSource.CLOSED || errorsInRow >= 2)) {
      es.close();
      es = null;
      startPolling();
      clearTimeout(retryTimer);
      retryTimer = setTimeout(() => {
        if (count() > 0) open();
      }, RETRY_MS);
    }
  };
}

function close() {
  if (es) es.close();
  es = null;
  stopPolling();
  clearTimeout(retryTimer);
  retryTimer = null;
  setStatus('idle');
}

// --- the polling fallback -------------------------------------------------

const lastInstances = new Map(); // id -> JSON text
let lastBalance = null;
let lastSeq = -1;
let eventsCursor = null; // the cursor of the last page seen (re-read, deduped by seq)
let primed = false;

function has(type) {
  const s = subs.get(type);
  return s && s.size > 0;
}

async function pollOnce() {
  try {
    if (has('instance')) {
      const items = await api.all('/v1/instances', {}, 5000);
      for (const it of items) {
        const j = JSON.stringify(it);
        if (lastInstances.get(it.id) !== j) {
          const known = lastInstances.has(it.id) || primed;
          lastInstances.set(it.id, j);
          if (known) emit('instance', it);
        }
      }
    }
    if (has('balance')) {
      const b = await api.get('/v1/balance');
      if (b && b.balance_micros !== lastBalance) {
        const first = lastBalance === null;
        lastBalance = b.balance_micros;
        if (!first || primed) emit('balance', { balance_micros: b.balance_micros });
      }
    }
    if (has('event')) {
      for (let i = 0; i < 20; i++) {
        const page = await api.get('/v1/events', { limit: 500, cursor: eventsCursor || undefined });
        const items = page.items || [];
        for (const ev of items) {
          if (ev.seq > lastSeq) {
            const first = lastSeq < 0 && !primed;
            if (!first) emit('event', ev);
          }
        }
        if (items.length) lastSeq = Math.max(lastSeq, items[items.length - 1].seq);
        if (!page.next_cursor || !items.length) break;
        eventsCursor = page.next_cursor;
      }
      if (lastSeq < 0) lastSeq = 0;
    }
    primed = true;
  } catch (e) {
    /* a failed poll waits for the next one; a 401 is handled by api.js */
  }
}

function startPolling() {
  setStatus('polling');
  if (pollTimer) return;
  pollOnce();
  pollTimer = setInterval(pollOnce, POLL_MS);
}

function stopPolling() {
  if (pollTimer) clearInterval(pollTimer);
  pollTimer = null;
}

// Close the stream before the page goes (a reload, a link away): left to
// the browser, a stream cut by the page's unload can keep its connection
// busy, and a browser allows only six to one server.
if (typeof window !== 'undefined') {
  window.addEventListener('pagehide', () => {
    if (es) es.close();
    es = null;
  });
}

export function onStream(type, fn) {
  if (!subs.has(type)) subs.set(type, new Set());
  subs.get(type).add(fn);
  // a new 'status' listener hears the present state at once
  if (type === 'status' && status !== 'idle') Promise.resolve().then(() => subs.get('status').has(fn) && fn(status));
  if (type !== 'status' && !es && !pollTimer) open();
  return () => {
    const s = subs.get(type);
    if (s) s.delete(fn);
    if (count() === 0) close();
  };
}

// Called at logout so a new login starts a fresh stream.
export function resetStream() {
  close();
  lastInstances.clear();
  lastBalance = null;
  lastSeq = -1;
  eventsCursor = null;
  primed = false;
}
