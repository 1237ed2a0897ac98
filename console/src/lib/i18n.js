// Messages in English and Chinese. Each module registers its own keys with
// addMessages({en: {...}, zh: {...}}); t(key, {name}) fills {name}
// placeholders. The locale comes from localStorage (the user's choice) or
// the browser's language, and setLocale() re-renders the app.

const messages = { en: {}, zh: {} };
const KEY = 'suanli.locale';
const listeners = new Set();

function initial() {
  try {
    const s = localStorage.getItem(KEY);
    if (s === 'en' || s === 'zh') return s;
  } catch (e) {
    /* storage may be off */
  }
  const langs = (typeof navigator !== 'undefined' && (navigator.languages || [navigator.language])) || [];
  for (const l of langs) {
    if (!l) continue;
    const low = l.toLowerCase();
    if (low.startsWith('zh')) return 'zh';
    if (low.startsWith('en')) return 'en';
  }
  return 'en';
}

let current = initial();
if (typeof document !== 'undefined') document.documentElement.lang = current === 'zh' ? 'zh-CN' : 'en';

export function addMessages(m) {
  for (const l of Object.keys(m)) {
    if (!messages[l]) messages[l] = {};
    Object.assign(messages[l], m[l]);
  }
}

export function t(key, vars) {
  let s = messages[current][key];
  if (s === undefined) s = messages.en[key];
  if (s === undefined) return key;
  if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (vars[k] === undefined || vars[k] === null ? m : String(vars[k])));
  return s;
}

export function locale() {
  return current;
}

// The BCP 47 tag for Intl.
export function intlLocale() {
  return current === 'zh' ? 'zh-CN' : 'en-US';
}

export function setLocale(l) {
  if (l !== 'en' && l !== 'zh') return;
  current = l;
  try {
    localStorage.setItem(KEY, l);
  } catch (e) {
    /* not stored: still switched for this page */
  }
  if (typeof document !== 'undefined') document.documentElement.lang = l === 'zh' ? 'zh-CN' : 'en';
  for (const fn of listeners) fn(l);
}

export function onLocale(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}
