// A small history-API router. suanlid answers index.html for every path
// that is not the API's, so a reload or a shared link lands on the same page.
import { html, useState, useEffect } from './ui.js';

const listeners = new Set();

export function currentPath() {
  return location.pathname;
}

export function currentQuery() {
  return new URLSearchParams(location.search);
}

function changed() {
  for (const fn of [...listeners]) fn(location.pathname);
}

export function navigate(path, { replace = false } = {}) {
  if (path === location.pathname + location.search) return;
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  window.scrollTo(0, 0);
  changed();
}

if (typeof window !== 'undefined') window.addEventListener('popstate', changed);

export function onRoute(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

// usePath(): the current path; the component re-renders when it changes.
export function usePath() {
  const [p, setP] = useState(currentPath());
  useEffect(() => onRoute(setP), []);
  return p;
}

// match('/instances/:id', '/instances/i-abc') -> {id: 'i-abc'}, or null.
export function match(pattern, path) {
  const a = pattern.split('/').filter(Boolean);
  const b = path.split('/').filter(Boolean);
  if (a.length !== b.length) return null;
  const params = {};
  for (let i = 0; i < a.length; i++) {
    if (a[i].startsWith(':')) params[a[i].slice(1)] = decodeURIComponent(b[i]);
    else if (a[i] !== b[i]) return null;
  }
  return params;
}

// A real <a href> (middle-click, copy link) that navigates in place.
export function Link({ href, children, class: cls, ...rest }) {
  const onClick = (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(href);
  };
  const active = location.pathname === href || (href !== '/' && location.pathname.startsWith(href + '/'));
  return html`<a href=${href} class=${cls} aria-current=${active ? 'page' : undefined} onClick=${onClick} ...${rest}>${children}</a>`;
}
