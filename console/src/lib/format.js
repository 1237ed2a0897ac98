// Numbers, money, dates and durations for the current locale (Intl).
// Money is int64 micros on the wire; it is shown in the region's currency
// (CNY unless the caller names another).
import { intlLocale, locale } from './i18n.js';

const cache = new Map();
function nf(key, opts) {
  const k = intlLocale() + '|' + key;
  let f = cache.get(k);
  if (!f) {
    f = new Intl.NumberFormat(intlLocale(), opts);
    cache.set(k, f);
  }
  return f;
}
function df(key, opts) {
  const k = intlLocale() + '|d|' + key;
  let f = cache.get(k);
  if (!f) {
    f = new Intl.DateTimeFormat(intlLocale(), opts);
    cache.set(k, f);
  }
  return f;
}

let defaultCurrency = 'CNY';
export function setDefaultCurrency(c) {
  if (c) defaultCurrency = c;
}
export function currency() {
  return defaultCurrency;
}

// fmtMoney(1980000) -> "¥1.98"; small amounts keep up to 4 decimals so a
// per-second price does not read as zero.
export function fmtMoney(micros, cur) {
  if (micros === undefined || micros === null) return '—';
  const c = cur || defaultCurrency;
  const v = Number(micros) / 1e6;
  const frac = v !== 0 && Math.abs(v) < 0.01 ? 4 : 2;
  try {
    return nf('m' + c + frac, { style: 'currency', currency: c, minimumFractionDigits: 2, maximumFractionDigits: frac }).format(v);
  } catch (e) {
    return v.toFixed(frac) + ' ' + c;
  }
}

export function fmtNumber(n, digits) {
  if (n === undefined || n === null) return '—';
  return nf('n' + (digits === undefined ? '' : digits), digits === undefined ? {} : { maximumFractionDigits: digits }).format(n);
}

export function fmtBytes(b) {
  if (b === undefined || b === null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(b);
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return fmtNumber(v, v < 10 && i > 0 ? 1 : 0) + ' ' + units[i];
}

function toDate(iso) {
  if (!iso) return null;
  const d = iso instanceof Date ? iso : new Date(iso);
  return isNaN(d.getTime()) ? null : d;
}

export function fmtDate(iso) {
  const d = toDate(iso);
  return d ? df('date', { year: 'numeric', month: '2-digit', day: '2-digit' }).format(d) : '—';
}

export function fmtDateTime(iso) {
  const d = toDate(iso);
  return d
    ? df('dt', { year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false }).format(d)
    : '—';
}

// fmtDuration(93784) -> "1d 2h 3m" / "1天2小时3分"
export function fmtDuration(seconds) {
  if (seconds === undefined || seconds === null || !isFinite(seconds)) return '—';
  let s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  const zh = locale() === 'zh';
  const U = zh ? { d: '天', h: '小时', m: '分', s: '秒' } : { d: 'd', h: 'h', m: 'm', s: 's' };
  const parts = [];
  if (d) parts.push(d + U.d);
  if (h) parts.push(h + U.h);
  if (m && d === 0) parts.push(m + U.m);
  if (!d && !h) parts.push(s + U.s);
  return parts.join(zh ? '' : ' ');
}
