// What the admin pages share: loading a route's data (with polling for the
// fleet, which has no event stream: docs/design/console.md), money typed by
// an operator, "how long ago", and the error shown when the caller is not an
// admin (the admin routes answer 404 not_found to anyone else, exactly as a
// route that does not exist).
import { html, useState, useEffect, useRef, useCallback } from '../lib/ui.js';
import { addMessages, t } from '../lib/i18n.js';
import { ErrorBox } from '../lib/components.js';

addMessages({
  en: {
    'admin.common.notAdmin': 'This page is for operators: sign in with an admin account to see the fleet.',
    'admin.common.refresh': 'Refresh',
    'admin.common.cancel': 'Cancel',
    'admin.common.close': 'Close',
    'admin.common.none': 'none',
    'admin.common.actions': 'Actions',
    'admin.common.ago.s': '{n} s ago',
    'admin.common.ago.m': '{n} min ago',
    'admin.common.ago.h': '{n} h ago',
    'admin.common.ago.d': '{n} d ago',
    'admin.common.never': 'never',
    'admin.common.amount.bad': 'Enter an amount such as 100 or 12.50 (at most 6 decimals).',
    'admin.common.amount.zero': 'Enter an amount above zero.',
    'admin.common.amount.big': 'That amount is too large.',
  },
  zh: {
    'admin.common.notAdmin': '此页面仅供运维人员使用：请用管理员账号登录后查看集群。',
    'admin.common.refresh': '刷新',
    'admin.common.cancel': '取消',
    'admin.common.close': '关闭',
    'admin.common.none': '无',
    'admin.common.actions': '操作',
    'admin.common.ago.s': '{n} 秒前',
    'admin.common.ago.m': '{n} 分钟前',
    'admin.common.ago.h': '{n} 小时前',
    'admin.common.ago.d': '{n} 天前',
    'admin.common.never': '从未',
    'admin.common.amount.bad': '请输入金额，例如 100 或 12.50（最多 6 位小数）。',
    'admin.common.amount.zero': '请输入大于零的金额。',
    'admin.common.amount.big': '金额过大。',
  },
});

// useLoad(fn, deps, {poll}) -> {data, error, loading, reload}. A failed
// refresh keeps the data already shown and shows the error beside it.
export function useLoad(fn, deps = [], opts = {}) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const seq = useRef(0);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const reload = useCallback(async (quiet) => {
    const mine = ++seq.current;
    if (!quiet) setState((s) => ({ ...s, loading: true }));
    try {
      const data = await fnRef.current();
      if (mine === seq.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (mine === seq.current) setState((s) => ({ data: s.data, error, loading: false }));
    }
  }, []);
  useEffect(() => {
    reload();
    if (!opts.poll) return undefined;
    const id = setInterval(() => {
      if (typeof document === 'undefined' || !document.hidden) reload(true);
    }, opts.poll);
    return () => {
      clearInterval(id);
      seq.current++;
    };
  }, deps);
  return { ...state, reload };
}

// True when the API said this caller may not see admin routes.
export function notAdmin(error) {
  return !!error && error.status === 404 && error.code === 'not_found';
}

// The error of a page's load: a non-admin gets a sentence saying whose page
// it is beside the server's own message.
export function LoadError({ error }) {
  if (!error) return null;
  if (notAdmin(error))
    return html`<div data-testid="admin-denied">
      <p class="warnbox">${t('admin.common.notAdmin')}</p>
      <${ErrorBox} error=${error} />
    </div>`;
  return html`<${ErrorBox} error=${error} />`;
}

// "12.5" -> 12500000 micros, exactly (no floating point): at most 6
// decimals, positive; throws an Error whose message is for the user.
export function parseAmount(text, { allowZero = false, max = 1e15 } = {}) {
  const s = String(text || '').trim().replace(/^[¥$€£]/, '').replace(/,/g, '');
  const m = /^(\d{1,10})(?:\.(\d{0,6}))?$/.exec(s);
  if (!m) throw new Error(t('admin.common.amount.bad'));
  const micros = Number(m[1]) * 1e6 + Number((m[2] || '').padEnd(6, '0'));
  if (!allowZero && micros <= 0) throw new Error(t('admin.common.amount.zero'));
  if (micros > max) throw new Error(t('admin.common.amount.big'));
  return micros;
}

// micros -> "12.5" for an input's initial value.
export function microsToText(micros) {
  if (micros === null || micros === undefined) return '';
  const n = Math.round(Number(micros));
  const whole = Math.floor(n / 1e6);
  const frac = String(n % 1e6).padStart(6, '0').replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : String(whole);
}

// "3 min ago" from an RFC 3339 time (now: ms since epoch).
export function ago(iso, now = Date.now()) {
  if (!iso) return t('admin.common.never');
  const s = Math.max(0, Math.round((now - new Date(iso).getTime()) / 1000));
  if (s < 90) return t('admin.common.ago.s', { n: s });
  if (s < 5400) return t('admin.common.ago.m', { n: Math.round(s / 60) });
  if (s < 172800) return t('admin.common.ago.h', { n: Math.round(s / 3600) });
  return t('admin.common.ago.d', { n: Math.round(s / 86400) });
}

// A form's submit: runs fn, tracks busy and the error to show.
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const run = useCallback(async (fn) => {
    setBusy(true);
    setError(null);
    try {
      return await fn();
    } catch (e) {
      setError(e);
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, setError, run };
}
