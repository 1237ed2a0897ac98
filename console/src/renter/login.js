// Log in and register: real <form>s with type=email / type=password inputs
// and autocomplete hints, so browsers and password managers fill and save
// them.
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { Page, ErrorBox, Field } from '../lib/components.js';
import { navigate, Link, currentQuery } from '../lib/router.js';

addMessages({
  en: {
    'login.title': 'Log in',
    'login.email': 'Email',
    'login.password': 'Password',
    'login.submit': 'Log in',
    'login.busy': 'Logging in…',
    'login.no_account': 'No account yet?',
    'login.register': 'Register',
    'reg.title': 'Register',
    'reg.name': 'Name (optional)',
    'reg.password_hint': 'At least 8 characters.',
    'reg.submit': 'Create account',
    'reg.busy': 'Creating…',
    'reg.have_account': 'Already registered?',
    'reg.mismatch': 'The two passwords differ: type the same password twice.',
    'reg.password2': 'Password again',
  },
  zh: {
    'login.title': '登录',
    'login.email': '邮箱',
    'login.password': '密码',
    'login.submit': '登录',
    'login.busy': '登录中…',
    'login.no_account': '还没有账号？',
    'login.register': '注册',
    'reg.title': '注册',
    'reg.name': '名字（可选）',
    'reg.password_hint': '至少 8 个字符。',
    'reg.submit': '创建账号',
    'reg.busy': '创建中…',
    'reg.have_account': '已有账号？',
    'reg.mismatch': '两次输入的密码不一致，请重新输入。',
    'reg.password2': '再次输入密码',
  },
});

function afterLogin(session, setMe) {
  setMe(session.user);
  const next = currentQuery().get('next');
  // only a path of this site: never an open redirect (history.pushState
  // refuses another origin anyway; "//host" and "/\\host" are not paths)
  navigate(next && /^\/(?![\/\\])/.test(next) ? next : '/instances', { replace: true });
}

export function Login({ setMe }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const f = e.target;
    setBusy(true);
    setError(null);
    try {
      const s = await api.post('/v1/sessions', { email: f.email.value.trim(), password: f.password.value }, { idempotent: false, quiet401: true });
      afterLogin(s, setMe);
    } catch (err) {
      setError(err);
      setBusy(false);
    }
  };
  return html`<${Page} title=${t('login.title')}>
    <form class="card narrow" method="post" action="/login" onSubmit=${submit} id="login-form">
      <${Field} label=${t('login.email')}>
        <input type="email" name="email" autocomplete="username" required autofocus inputmode="email" />
      <//>
      <${Field} label=${t('login.password')}>
        <input type="password" name="password" autocomplete="current-password" required />
      <//>
      <${ErrorBox} error=${error} />
      <div class="buttons">
        <button type="submit" class="primary" disabled=${busy}>${busy ? t('login.busy') : t('login.submit')}</button>
      </div>
      <p>${t('login.no_account')} <${Link} href="/register">${t('login.register')}<//></p>
    </form>
  <//>`;
}

export function Register({ setMe }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const f = e.target;
    if (f.password.value !== f.password2.value) {
      setError(t('reg.mismatch'));
      return;
    }
    setBusy(true);
    setError(null);
    const email = f.email.value.trim();
    const password = f.password.value;
    try {
      const body = { email, password };
      if (f.name.value.trim()) body.name = f.name.value.trim();
      await api.post('/v1/users', body);
      const s = await api.post('/v1/sessions', { email, password }, { idempotent: false, quiet401: true });
      setMe(s.user);
      navigate('/account', { replace: true });
    } catch (err) {
      setError(err);
      setBusy(false);
    }
  };
  return html`<${Page} title=${t('reg.title')}>
    <form class="card narrow" method="post" action="/register" onSubmit=${submit} id="register-form">
      <${Field} label=${t('login.email')}>
        <input type="email" name="email" autocomplete="email" required autofocus inputmode="email" />
      <//>
      <${Field} label=${t('reg.name')}>
        <input type="text" name="name" autocomplete="name" maxlength="100" />
      <//>
      <${Field} label=${t('login.password')} hint=${t('reg.password_hint')}>
        <input type="password" name="password" autocomplete="new-password" required minlength="8" />
      <//>
      <${Field} label=${t('reg.password2')}>
        <input type="password" name="password2" autocomplete="new-password" required minlength="8" />
      <//>
      <${ErrorBox} error=${error} />
      <div class="buttons">
        <button type="submit" class="primary" disabled=${busy}>${busy ? t('reg.busy') : t('reg.submit')}</button>
      </div>
      <p>${t('reg.have_account')} <${Link} href="/login">${t('login.title')}<//></p>
    </form>
  <//>`;
}
