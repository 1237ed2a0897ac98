// Users and credit: every user with role, verification and balance; find
// one by email; credit a balance with a memo. One Idempotency-Key per
// credit, so a retried submit cannot credit twice.
import { html, useState, useRef } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';
import { fmtDateTime, fmtMoney, currency } from '../lib/format.js';
import { Page, ErrorBox, Dialog, Field, Spinner, Badge, Table } from '../lib/components.js';
import { useLoad, useAction, LoadError, parseAmount } from './common.js';

addMessages({
  en: {
    'admin.users.title': 'Users & credit',
    'admin.users.search': 'Search',
    'admin.users.searchLabel': 'Email, name or id',
    'admin.users.searchHint': 'A whole email address asks the server; anything else filters the users loaded here.',
    'admin.users.clear': 'Clear',
    'admin.users.empty': 'No user matches.',
    'admin.users.col.user': 'User',
    'admin.users.col.role': 'Role',
    'admin.users.col.verification': 'Verification',
    'admin.users.col.balance': 'Balance',
    'admin.users.col.created': 'Registered',
    'admin.users.role.admin': 'admin',
    'admin.users.role.renter': 'renter',
    'admin.users.ver.none': 'not submitted',
    'admin.users.ver.pending': 'pending',
    'admin.users.ver.approved': 'approved',
    'admin.users.ver.rejected': 'rejected',
    'admin.users.credit': 'Credit',
    'admin.users.creditLabel': 'Credit {email}',
    'admin.users.creditTitle': 'Credit {email}',
    'admin.users.balanceNow': 'Balance now: {balance}',
    'admin.users.amount': 'Amount ({currency})',
    'admin.users.amountHint': 'Added to the balance, such as 100 or 12.50.',
    'admin.users.memo': 'Memo',
    'admin.users.memoHint': 'Why: shown in the user\'s ledger.',
    'admin.users.submit': 'Credit {amount}',
    'admin.users.submitPlain': 'Credit',
    'admin.users.credited': 'Credited {amount} to {email}; balance now {balance}.',
    'admin.users.shown': '{shown} of {loaded} users loaded',
    'admin.users.list': 'Users',
  },
  zh: {
    'admin.users.title': '用户与充值',
    'admin.users.search': '搜索',
    'admin.users.searchLabel': '邮箱、姓名或 ID',
    'admin.users.searchHint': '完整的邮箱地址会向服务器查询；其他内容只筛选已加载的用户。',
    'admin.users.clear': '清除',
    'admin.users.empty': '没有匹配的用户。',
    'admin.users.col.user': '用户',
    'admin.users.col.role': '角色',
    'admin.users.col.verification': '实名认证',
    'admin.users.col.balance': '余额',
    'admin.users.col.created': '注册时间',
    'admin.users.role.admin': '管理员',
    'admin.users.role.renter': '租户',
    'admin.users.ver.none': '未提交',
    'admin.users.ver.pending': '待审核',
    'admin.users.ver.approved': '已通过',
    'admin.users.ver.rejected': '已拒绝',
    'admin.users.credit': '充值',
    'admin.users.creditLabel': '充值：{email}',
    'admin.users.creditTitle': '为 {email} 充值',
    'admin.users.balanceNow': '当前余额：{balance}',
    'admin.users.amount': '金额（{currency}）',
    'admin.users.amountHint': '加到余额上，例如 100 或 12.50。',
    'admin.users.memo': '备注',
    'admin.users.memoHint': '原因：会显示在用户的流水中。',
    'admin.users.submit': '充值 {amount}',
    'admin.users.submitPlain': '充值',
    'admin.users.credited': '已为 {email} 充值 {amount}，当前余额 {balance}。',
    'admin.users.shown': '已加载 {loaded} 位用户，显示 {shown} 位',
    'admin.users.list': '用户',
  },
});

const VER_KIND = { none: 'muted', pending: 'warn', approved: 'ok', rejected: 'bad' };

function newKey() {
  return globalThis.crypto && crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(36).slice(2);
}

function CreditDialog({ user, onClose, onDone }) {
  const [amount, setAmount] = useState('');
  const [memo, setMemo] = useState('');
  // one key for the retries of one credit: a lost answer (network, 5xx)
  // keeps it, so the retry cannot credit twice; a refusal (4xx) is final,
  // so the next try, perhaps corrected, is a new request with a new key
  const key = useRef(null);
  const { busy, error, setError, run } = useAction();
  let preview = null;
  try {
    preview = amount ? parseAmount(amount) : null;
  } catch (e) {
    preview = null;
  }
  const submit = (e) => {
    e.preventDefault();
    let micros;
    try {
      micros = parseAmount(amount);
    } catch (err) {
      return setError(err);
    }
    const body = { amount_micros: micros };
    if (memo.trim()) body.memo = memo.trim();
    if (!key.current) key.current = newKey();
    return run(async () => {
      try {
        onDone(await api.post(`/v1/admin/users/${user.id}/credit`, body, { key: key.current }));
      } catch (err) {
        if (err.status >= 400 && err.status < 500) key.current = null;
        throw err;
      }
    });
  };
  return html`<${Dialog} open=${true} title=${t('admin.users.creditTitle', { email: user.email })} onClose=${onClose}>
    <form onSubmit=${submit}>
      <p>${t('admin.users.balanceNow', { balance: fmtMoney(user.balance_micros) })}</p>
      <${Field} label=${t('admin.users.amount', { currency: currency() })} hint=${t('admin.users.amountHint')}>
        <input type="text" inputmode="decimal" name="amount" required autocomplete="off" value=${amount} onInput=${(e) => setAmount(e.target.value)} />
      </${Field}>
      <${Field} label=${t('admin.users.memo')} hint=${t('admin.users.memoHint')}>
        <input type="text" name="memo" maxlength="200" value=${memo} onInput=${(e) => setMemo(e.target.value)} />
      </${Field}>
      <${ErrorBox} error=${error} />
      <div class="buttons">
        <button type="button" onClick=${onClose}>${t('admin.common.cancel')}</button>
        <button type="submit" class="primary" disabled=${busy}>
          ${preview ? t('admin.users.submit', { amount: fmtMoney(preview) }) : t('admin.users.submitPlain')}
        </button>
      </div>
    </form>
  </${Dialog}>`;
}

export default function Users() {
  const [query, setQuery] = useState('');
  const [asked, setAsked] = useState('');
  const list = useLoad(() => (asked
    ? api.get('/v1/admin/users', { email: asked }).then((p) => p.items)
    : api.all('/v1/admin/users')), [asked]);
  const [crediting, setCrediting] = useState(null);
  const [notice, setNotice] = useState(null);

  const q = query.trim().toLowerCase();
  const loaded = list.data || [];
  const shown = asked || !q ? loaded : loaded.filter((u) => u.email.includes(q) || u.id.includes(q) || (u.name || '').toLowerCase().includes(q));
  const columns = [
    { key: 'user', label: t('admin.users.col.user'), render: (u) => html`<span data-user=${u.id}>${u.email}</span><div class="muted">${u.name} · <code>${u.id}</code></div>` },
    { key: 'role', label: t('admin.users.col.role'), render: (u) => t('admin.users.role.' + u.role) },
    { key: 'verification', label: t('admin.users.col.verification'), render: (u) => html`<span data-field="verification" data-value=${u.verification}><${Badge} kind=${VER_KIND[u.verification]}>${t('admin.users.ver.' + u.verification)}</${Badge}></span>` },
    { key: 'balance', label: t('admin.users.col.balance'), class: 'num', render: (u) => html`<span data-field="balance">${fmtMoney(u.balance_micros)}</span>` },
    { key: 'created', label: t('admin.users.col.created'), render: (u) => fmtDateTime(u.created_at) },
    {
      key: 'actions',
      label: t('admin.common.actions'),
      render: (u) => html`<button type="button" class="small" data-action="credit" aria-label=${t('admin.users.creditLabel', { email: u.email })}
        onClick=${() => setCrediting(u)}>${t('admin.users.credit')}</button>`,
    },
  ];
  const search = (e) => {
    e.preventDefault();
    setAsked(/^[^\s@]+@[^\s@]+$/.test(q) ? q : '');
  };
  const clear = () => {
    setQuery('');
    setAsked('');
  };
  return html`<${Page} title=${t('admin.users.title')}>
    <form class="filters" role="search" onSubmit=${search}>
      <${Field} label=${t('admin.users.searchLabel')} hint=${t('admin.users.searchHint')}>
        <input type="search" name="q" value=${query} onInput=${(e) => { setQuery(e.target.value); if (asked) setAsked(''); }} />
      </${Field}>
      <div class="buttons">
        <button type="submit">${t('admin.users.search')}</button>
        <button type="button" onClick=${clear}>${t('admin.users.clear')}</button>
      </div>
    </form>
    <${LoadError} error=${list.error} />
    ${notice ? html`<p class="notice" role="status" data-testid="credit-notice">${notice}</p>` : null}
    ${list.loading && !list.data ? html`<${Spinner} />` : null}
    ${list.data ? html`<p class="muted">${t('admin.users.shown', { shown: shown.length, loaded: loaded.length })}</p>` : null}
    ${list.data ? html`<div data-testid="users-table"><${Table} columns=${columns} rows=${shown} empty=${t('admin.users.empty')} caption=${t('admin.users.list')} /></div>` : null}
    ${crediting
      ? html`<${CreditDialog} user=${crediting} onClose=${() => setCrediting(null)} onDone=${(r) => {
          setNotice(t('admin.users.credited', { amount: fmtMoney(r.amount_micros), email: crediting.email, balance: fmtMoney(r.balance_micros) }));
          setCrediting(null);
          list.reload(true);
        }} />`
      : null}
  </${Page}>`;
}
