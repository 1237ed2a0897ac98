// SSH public keys (installed in every instance you start) and API tokens
// (for the CLI and scripts; the secret is shown once).
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtDateTime } from '../lib/format.js';
import { Page, ErrorBox, Field, Table, Badge, CopyButton, Confirm, useLoad } from '../lib/components.js';

addMessages({
  en: {
    'keys.title': 'SSH keys & API tokens',
    'keys.ssh': 'SSH keys',
    'keys.ssh_note': 'Installed for root in every instance you start from now on.',
    'keys.name': 'Name',
    'keys.type': 'Type',
    'keys.fingerprint': 'Fingerprint',
    'keys.added': 'Added',
    'keys.delete': 'Delete',
    'keys.delete_named': 'Delete {name}',
    'keys.public_key': 'Public key (one line, such as the contents of ~/.ssh/id_ed25519.pub)',
    'keys.key_name': 'Name (optional)',
    'keys.add': 'Add key',
    'keys.none': 'No SSH keys yet: the root password works meanwhile.',
    'tok.title': 'API tokens',
    'tok.note': 'For the CLI (suanli --token TOKEN, or SUANLI_TOKEN) and scripts: send it as "Authorization: Bearer TOKEN".',
    'tok.kind': 'Kind',
    'tok.hint': 'Starts with',
    'tok.created': 'Created',
    'tok.expires': 'Expires',
    'tok.last_used': 'Last used',
    'tok.never': 'never',
    'tok.current': 'this session',
    'tok.revoke': 'Revoke',
    'tok.revoke_named': 'Revoke {name}',
    'tok.revoke_title': 'Revoke {name}?',
    'tok.revoke_msg': 'Anything using it stops working at once.',
    'tok.name': 'Name',
    'tok.days': 'Expires after (days; empty = never)',
    'tok.create': 'Create token',
    'tok.secret': 'Your new token: copy it now, it is not shown again.',
    'tok.copy': 'Copy token',
    'tok.kind.session': 'login',
    'tok.kind.api': 'API',
  },
  zh: {
    'keys.title': 'SSH 密钥与 API 令牌',
    'keys.ssh': 'SSH 公钥',
    'keys.ssh_note': '此后开机的每个实例都会为 root 安装这些公钥。',
    'keys.name': '名称',
    'keys.type': '类型',
    'keys.fingerprint': '指纹',
    'keys.added': '添加时间',
    'keys.delete': '删除',
    'keys.delete_named': '删除 {name}',
    'keys.public_key': '公钥（一行，例如 ~/.ssh/id_ed25519.pub 的内容）',
    'keys.key_name': '名称（可选）',
    'keys.add': '添加公钥',
    'keys.none': '还没有 SSH 公钥：可以先用 root 密码登录。',
    'tok.title': 'API 令牌',
    'tok.note': '用于命令行（suanli --token TOKEN 或 SUANLI_TOKEN）和脚本：以 "Authorization: Bearer TOKEN" 发送。',
    'tok.kind': '类型',
    'tok.hint': '开头',
    'tok.created': '创建时间',
    'tok.expires': '过期时间',
    'tok.last_used': '最近使用',
    'tok.never': '从不',
    'tok.current': '当前会话',
    'tok.revoke': '吊销',
    'tok.revoke_named': '吊销 {name}',
    'tok.revoke_title': '吊销 {name}？',
    'tok.revoke_msg': '使用它的程序会立即失效。',
    'tok.name': '名称',
    'tok.days': '有效天数（留空为永不过期）',
    'tok.create': '创建令牌',
    'tok.secret': '新令牌：请立即复制，之后不会再显示。',
    'tok.copy': '复制令牌',
    'tok.kind.session': '登录',
    'tok.kind.api': 'API',
  },
});

function SshKeys() {
  const keys = useLoad(() => api.all('/v1/ssh-keys'), []);
  const [err, setErr] = useState(null);
  const add = async (e) => {
    e.preventDefault();
    const f = e.target;
    setErr(null);
    const body = { public_key: f.public_key.value };
    if (f.name.value.trim()) body.name = f.name.value.trim();
    try {
      await api.post('/v1/ssh-keys', body);
      f.reset();
      keys.reload();
    } catch (x) {
      setErr(x);
    }
  };
  const del = async (k) => {
    setErr(null);
    try {
      await api.del('/v1/ssh-keys/' + k.id);
      keys.reload();
    } catch (x) {
      setErr(x);
    }
  };
  const cols = [
    { key: 'name', label: t('keys.name') },
    { key: 'type', label: t('keys.type') },
    { key: 'fingerprint', label: t('keys.fingerprint'), render: (k) => html`<code>${k.fingerprint}</code>` },
    { key: 'created_at', label: t('keys.added'), render: (k) => fmtDateTime(k.created_at) },
    { key: 'act', label: '', render: (k) => html`<button type="button" class="small" aria-label=${t('keys.delete_named', { name: k.name })} onClick=${() => del(k)}>${t('keys.delete')}</button>` },
  ];
  return html`<section aria-labelledby="ssh-h">
    <h2 id="ssh-h">${t('keys.ssh')}</h2>
    <p class="hint">${t('keys.ssh_note')}</p>
    <${ErrorBox} error=${keys.error} />
    <${Table} columns=${cols} rows=${keys.data} error=${keys.error} empty=${t('keys.none')} caption=${t('keys.ssh')} />
    <form class="card" onSubmit=${add} style="margin-top:1rem" id="ssh-key-form">
      <${Field} label=${t('keys.public_key')}><textarea name="public_key" required spellcheck="false" autocomplete="off"></textarea><//>
      <${Field} label=${t('keys.key_name')}><input name="name" maxlength="100" autocomplete="off" /><//>
      <${ErrorBox} error=${err} />
      <button type="submit" class="primary">${t('keys.add')}</button>
    </form>
  </section>`;
}

function Tokens() {
  const toks = useLoad(() => api.all('/v1/tokens'), []);
  const [err, setErr] = useState(null);
  const [secret, setSecret] = useState(null);
  const [revoke, setRevoke] = useState(null);
  const create = async (e) => {
    e.preventDefault();
    const f = e.target;
    setErr(null);
    const body = { name: f.name.value.trim() };
    if (f.days.value) body.expires_in_days = Number(f.days.value);
    try {
      const r = await api.post('/v1/tokens', body, { idempotent: false });
      setSecret(r.token);
      f.reset();
      toks.reload();
    } catch (x) {
      setErr(x);
    }
  };
  const cols = [
    { key: 'name', label: t('tok.name'), render: (k) => html`${k.name || '—'} ${k.current ? html`<${Badge} kind="info">${t('tok.current')}<//>` : null}` },
    { key: 'kind', label: t('tok.kind'), render: (k) => t('tok.kind.' + k.kind) },
    { key: 'hint', label: t('tok.hint'), render: (k) => html`<code>${k.hint}…</code>` },
    { key: 'created_at', label: t('tok.created'), render: (k) => fmtDateTime(k.created_at) },
    { key: 'expires_at', label: t('tok.expires'), render: (k) => (k.expires_at ? fmtDateTime(k.expires_at) : t('tok.never')) },
    { key: 'last_used_at', label: t('tok.last_used'), render: (k) => (k.last_used_at ? fmtDateTime(k.last_used_at) : '—') },
    {
      key: 'act',
      label: '',
      render: (k) =>
        k.current ? null : html`<button type="button" class="small" aria-label=${t('tok.revoke_named', { name: k.name || k.hint })} onClick=${() => setRevoke(k)}>${t('tok.revoke')}</button>`,
    },
  ];
  return html`<section aria-labelledby="tok-h">
    <h2 id="tok-h">${t('tok.title')}</h2>
    <p class="hint">${t('tok.note')}</p>
    <${ErrorBox} error=${toks.error} />
    <${Table} columns=${cols} rows=${toks.data} error=${toks.error} caption=${t('tok.title')} />
    ${secret
      ? html`<div class="notice" role="status"><p>${t('tok.secret')}</p><p class="cmd"><code id="new-token">${secret}</code> <${CopyButton} text=${secret} label=${t('tok.copy')} class="small" /></p></div>`
      : null}
    <form class="card filters" onSubmit=${create} style="margin-top:1rem" id="token-form">
      <${Field} label=${t('tok.name')}><input name="name" required maxlength="100" autocomplete="off" /><//>
      <${Field} label=${t('tok.days')}><input name="days" type="number" min="1" max="3650" step="1" /><//>
      <button type="submit" class="primary">${t('tok.create')}</button>
    </form>
    <${ErrorBox} error=${err} />
    <${Confirm} open=${!!revoke} title=${t('tok.revoke_title', { name: revoke ? revoke.name || revoke.hint : '' })} message=${t('tok.revoke_msg')}
      confirmLabel=${t('tok.revoke')} danger onClose=${() => setRevoke(null)}
      onConfirm=${async () => {
        try {
          await api.del('/v1/tokens/' + revoke.id);
          setRevoke(null);
          toks.reload();
        } catch (x) {
          setErr(x);
          setRevoke(null);
        }
      }} />
  </section>`;
}

export default function Keys() {
  return html`<${Page} title=${t('keys.title')}>
    <${SshKeys} />
    <${Tokens} />
  <//>`;
}
