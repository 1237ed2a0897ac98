// The console's shell: the route table, the layout (navigation, language,
// who is logged in, logout) and the lazy loading of each page's module.
import './style.css';
import { html, render, useState, useEffect } from './lib/ui.js';
import { api, onUnauthenticated } from './lib/api.js';
import { t, addMessages, locale, setLocale, onLocale } from './lib/i18n.js';
import { usePath, navigate, Link, match, currentPath } from './lib/router.js';
import { ErrorBox, Spinner } from './lib/components.js';
import { onStream, resetStream } from './lib/events.js';
import { fmtMoney } from './lib/format.js';
import { adminRoutes } from './admin/routes.js';

addMessages({
  en: {
    'nav.label': 'Main',
    'nav.market': 'Market',
    'nav.instances': 'Instances',
    'nav.storage': 'File storage',
    'nav.keys': 'SSH keys & tokens',
    'nav.billing': 'Billing',
    'nav.events': 'Events',
    'nav.account': 'Account',
    'nav.admin': 'Operator',
    'nav.logout': 'Log out',
    'nav.login': 'Log in',
    'nav.register': 'Register',
    'nav.language': 'Language',
    'nav.balance': 'Balance',
    'nav.skip': 'Skip to content',
    'nav.menu': 'Menu',
    'app.not_found': 'No page here. Pick one from the menu.',
    'app.load_failed': 'This page could not be loaded: {message}. Reload to try again.',
    'app.unavailable': 'This page is not part of this build of the console.',
  },
  zh: {
    'nav.label': '主导航',
    'nav.market': '算力市场',
    'nav.instances': '容器实例',
    'nav.storage': '文件存储',
    'nav.keys': 'SSH 密钥与令牌',
    'nav.billing': '费用中心',
    'nav.events': '事件',
    'nav.account': '账号',
    'nav.admin': '运营',
    'nav.logout': '退出登录',
    'nav.login': '登录',
    'nav.register': '注册',
    'nav.language': '语言',
    'nav.balance': '余额',
    'nav.skip': '跳到正文',
    'nav.menu': '菜单',
    'app.not_found': '这里没有页面，请从菜单中选择。',
    'app.load_failed': '页面加载失败：{message}。请刷新重试。',
    'app.unavailable': '此版本的控制台不含这个页面。',
  },
});

// Each page is its own chunk, loaded on first visit.
const renterRoutes = [
  { path: '/market', nav: 'nav.market', load: () => import('./renter/market.js') },
  { path: '/instances', nav: 'nav.instances', load: () => import('./renter/instances.js') },
  { path: '/instances/:id', load: () => import('./renter/instance.js') },
  { path: '/storage', nav: 'nav.storage', load: () => import('./renter/storage.js') },
  { path: '/keys', nav: 'nav.keys', load: () => import('./renter/keys.js') },
  { path: '/billing', nav: 'nav.billing', load: () => import('./renter/billing.js') },
  { path: '/events', nav: 'nav.events', load: () => import('./renter/events.js') },
  { path: '/account', nav: 'nav.account', load: () => import('./renter/account.js') },
];
const publicRoutes = [
  { path: '/login', load: () => import('./renter/login.js'), exportName: 'Login' },
  { path: '/register', load: () => import('./renter/login.js'), exportName: 'Register' },
];

const loaded = new Map();
function Lazy({ route, params, me, setMe }) {
  const key = route.path;
  const [mod, setMod] = useState(() => loaded.get(key) || null);
  const [error, setError] = useState(null);
  useEffect(() => {
    if (loaded.get(key)) {
      setMod(loaded.get(key));
      return;
    }
    let live = true;
    setMod(null);
    route.load().then(
      (m) => {
        const C = route.exportName ? m[route.exportName] : m.default;
        loaded.set(key, { C });
        if (live) setMod({ C });
      },
      (e) => live && setError(e),
    );
    return () => {
      live = false;
    };
  }, [key]);
  if (error) return html`<${ErrorBox} error=${t('app.load_failed', { message: error.message })} />`;
  if (!mod) return html`<${Spinner} />`;
  const C = mod.C;
  if (!C) return html`<p class="warnbox">${t('app.unavailable')}</p>`;
  return html`<${C} ...${params} params=${params} me=${me} setMe=${setMe} />`;
}

function find(routes, path) {
  for (const r of routes) {
    const p = match(r.path, path);
    if (p) return { route: r, params: p };
  }
  return null;
}

function Balance() {
  const [b, setB] = useState(null);
  useEffect(() => {
    api.get('/v1/balance').then((x) => setB(x.balance_micros), () => {});
    return onStream('balance', (x) => setB(x.balance_micros));
  }, []);
  if (b === null) return null;
  return html`<${Link} href="/billing" class="balance"><span class="sr-only">${t('nav.balance')}: </span>${fmtMoney(b)}<//>`;
}

function LocaleSwitch() {
  return html`<label class="locale">
    <span class="sr-only">${t('nav.language')}</span>
    <select value=${locale()} onChange=${(e) => setLocale(e.target.value)}>
      <option value="zh" lang="zh-CN">中文</option>
      <option value="en" lang="en">English</option>
    </select>
  </label>`;
}

function Nav({ me, onLogout }) {
  const [open, setOpen] = useState(false);
  const path = usePath();
  useEffect(() => setOpen(false), [path]);
  const links = me
    ? [
        ...renterRoutes.filter((r) => r.nav),
        ...(me.role === 'admin' ? adminRoutes.filter((r) => r.nav) : []),
      ]
    : [];
  return html`<header class="top">
    <a class="skip" href="#main">${t('nav.skip')}</a>
    <${Link} href="/" class="brand">suanli<span class="brand-zh">算力</span><//>
    ${me
      ? html`<button type="button" class="menu-btn" aria-expanded=${open} aria-controls="nav" onClick=${() => setOpen(!open)}>${t('nav.menu')}</button>`
      : null}
    <nav id="nav" aria-label=${t('nav.label')} class=${open ? 'open' : ''}>
      <ul>
        ${links.map(
          (r, i) => html`${r.path.startsWith('/admin') && (i === 0 || !links[i - 1].path.startsWith('/admin'))
              ? html`<li class="sep" aria-hidden="true">${t('nav.admin')}</li>`
              : null}<li><${Link} href=${r.path}>${t(r.nav)}<//></li>`,
        )}
      </ul>
    </nav>
    <div class="who">
      ${me ? html`<${Balance} />` : null}
      <${LocaleSwitch} />
      ${me
        ? html`<span class="email" title=${me.email}>${me.email}</span>
            <button type="button" onClick=${onLogout}>${t('nav.logout')}</button>`
        : html`<${Link} href="/login">${t('nav.login')}<//> <${Link} href="/register">${t('nav.register')}<//>`}
    </div>
  </header>`;
}

function App() {
  const [me, setMe] = useState(undefined); // undefined: asking; null: logged out
  const [, setLoc] = useState(locale());
  const path = usePath();
  useEffect(() => onLocale(setLoc), []);
  useEffect(() => {
    api.get('/v1/me', undefined, { quiet401: true }).then(setMe, (e) => {
      if (e.status === 401) setMe(null);
      else setMe({ error: e });
    });
    return onUnauthenticated(() => {
      resetStream();
      setMe(null);
    });
  }, []);
  useEffect(() => {
    if (me === undefined || (me && me.error)) return;
    const isPublic = path === '/login' || path === '/register';
    if (!me && !isPublic) {
      const next = path === '/' ? '' : '?next=' + encodeURIComponent(path + location.search);
      navigate('/login' + next, { replace: true });
    } else if (me && (isPublic || path === '/')) {
      navigate('/instances', { replace: true });
    }
  }, [me, path]);
  // Move focus to the new page's heading so screen readers announce it.
  useEffect(() => {
    const h = document.getElementById('page-title');
    if (h && document.activeElement === document.body) h.focus({ preventScroll: true });
  });

  const logout = async () => {
    try {
      await api.del('/v1/sessions/current');
    } catch (e) {
      /* the session is gone either way */
    }
    resetStream();
    setMe(null);
    navigate('/login');
  };

  let body;
  if (me === undefined) body = html`<${Spinner} />`;
  else if (me && me.error) body = html`<${ErrorBox} error=${me.error} />`;
  else {
    const found = me ? find([...renterRoutes, ...(me.role === 'admin' ? adminRoutes : [])], path) : find(publicRoutes, path);
    const pub = !me && find(publicRoutes, path);
    const hit = found || pub;
    if (hit) body = html`<${Lazy} key=${hit.route.path} route=${hit.route} params=${hit.params} me=${me} setMe=${setMe} />`;
    else if ((me && path === '/') || (!me && path !== '/login')) body = html`<${Spinner} />`;
    else body = html`<p>${t('app.not_found')}</p>`;
  }
  return html`<${Nav} me=${me && !me.error ? me : null} onLogout=${logout} />
    <main id="main" tabindex="-1">${body}</main>`;
}

render(html`<${App} />`, document.getElementById('app'));
