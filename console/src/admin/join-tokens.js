// Join tokens: the secrets that let a host's agent enroll into a region.
// Create (region, lifetime, uses; the secret is shown once), list the ones
// not yet expired with their uses, revoke (DELETE, at once). Regions can be
// added here too, since a token names one.
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';
import { fmtDateTime, fmtNumber } from '../lib/format.js';
import { Page, ErrorBox, Dialog, Field, Spinner, CopyButton, Table } from '../lib/components.js';
import { useLoad, useAction, LoadError } from './common.js';

addMessages({
  en: {
    'admin.join.title': 'Join tokens',
    'admin.join.intro': 'A join token lets a host\'s agent (suanli-node) enroll into a region. It is shown once: save it to a file only root reads on the host and start the agent with --join FILE.',
    'admin.join.create': 'Create a join token',
    'admin.join.region': 'Region',
    'admin.join.hours': 'Expires in (hours)',
    'admin.join.hoursHint': 'Empty: the server\'s default (24 h).',
    'admin.join.uses': 'Hosts it may enroll',
    'admin.join.submit': 'Create token',
    'admin.join.created': 'New join token for {region}',
    'admin.join.secretOnce': 'Copy it now: it is never shown again.',
    'admin.join.copy': 'Copy the token',
    'admin.join.list': 'Tokens not yet expired',
    'admin.join.empty': 'No join token is valid now.',
    'admin.join.col.id': 'Token',
    'admin.join.col.region': 'Region',
    'admin.join.col.created': 'Created',
    'admin.join.col.expires': 'Expires',
    'admin.join.col.uses': 'Uses',
    'admin.join.unlimited': 'any number',
    'admin.join.revoke': 'Revoke',
    'admin.join.revokeLabel': 'Revoke {id}',
    'admin.join.revokeTitle': 'Revoke {id}?',
    'admin.join.revokeText': 'The token stops working at once. Hosts it already enrolled stay enrolled.',
    'admin.join.revoked': 'Join token {id} revoked.',
    'admin.join.newRegion': 'Add a region',
    'admin.join.regionId': 'Region id',
    'admin.join.regionIdHint': 'Lowercase letters, digits and -, such as bj-1.',
    'admin.join.regionName': 'Name',
    'admin.join.addRegion': 'Add region',
    'admin.join.sample': '(sample)',
    'admin.join.hoursBad': 'Enter a whole number of hours from 1 to 8760, or leave it empty.',
    'admin.join.usesBad': 'Enter a whole number from 1 to 10000.',
  },
  zh: {
    'admin.join.title': '加入令牌',
    'admin.join.intro': '加入令牌让主机上的代理（suanli-node）加入某个地区。令牌只显示一次：请在主机上存入仅 root 可读的文件，并以 --join 文件 启动代理。',
    'admin.join.create': '创建加入令牌',
    'admin.join.region': '地区',
    'admin.join.hours': '有效期（小时）',
    'admin.join.hoursHint': '留空：使用服务器默认值（24 小时）。',
    'admin.join.uses': '可加入的主机数',
    'admin.join.submit': '创建令牌',
    'admin.join.created': '{region} 的新加入令牌',
    'admin.join.secretOnce': '请立即复制：之后不会再显示。',
    'admin.join.copy': '复制令牌',
    'admin.join.list': '未过期的令牌',
    'admin.join.empty': '目前没有有效的加入令牌。',
    'admin.join.col.id': '令牌',
    'admin.join.col.region': '地区',
    'admin.join.col.created': '创建时间',
    'admin.join.col.expires': '过期时间',
    'admin.join.col.uses': '使用次数',
    'admin.join.unlimited': '不限',
    'admin.join.revoke': '吊销',
    'admin.join.revokeLabel': '吊销 {id}',
    'admin.join.revokeTitle': '吊销 {id}？',
    'admin.join.revokeText': '令牌立即失效。已用它加入的主机不受影响。',
    'admin.join.revoked': '加入令牌 {id} 已吊销。',
    'admin.join.newRegion': '添加地区',
    'admin.join.regionId': '地区 ID',
    'admin.join.regionIdHint': '小写字母、数字和 -，例如 bj-1。',
    'admin.join.regionName': '名称',
    'admin.join.addRegion': '添加地区',
    'admin.join.sample': '（示例）',
    'admin.join.hoursBad': '请输入 1 到 8760 之间的整数小时数，或留空。',
    'admin.join.usesBad': '请输入 1 到 10000 之间的整数。',
  },
});

function intIn(text, lo, hi) {
  const s = String(text).trim();
  if (!/^\d+$/.test(s)) return null;
  const n = Number(s);
  return n >= lo && n <= hi ? n : null;
}

function CreateToken({ regions, onCreated }) {
  const [region, setRegion] = useState('');
  const [hours, setHours] = useState('');
  const [uses, setUses] = useState('1');
  const { busy, error, setError, run } = useAction();
  const chosen = region || (regions[0] && regions[0].id) || '';

  const submit = (e) => {
    e.preventDefault();
    const body = { region: chosen };
    if (hours.trim()) {
      const h = intIn(hours, 1, 8760);
      if (h === null) return setError(new Error(t('admin.join.hoursBad')));
      body.expires_in_hours = h;
    }
    const u = intIn(uses, 1, 10000);
    if (u === null) return setError(new Error(t('admin.join.usesBad')));
    body.max_uses = u;
    return run(async () => onCreated(await api.post('/v1/admin/join-tokens', body, { idempotent: false })));
  };
  return html`<form class="card narrow" onSubmit=${submit} aria-labelledby="join-create-h">
    <h2 id="join-create-h">${t('admin.join.create')}</h2>
    <${Field} label=${t('admin.join.region')}>
      <select name="region" value=${chosen} onChange=${(e) => setRegion(e.target.value)}>
        ${regions.map((r) => html`<option key=${r.id} value=${r.id}>${r.id} · ${r.name}${r.sample ? ' ' + t('admin.join.sample') : ''}</option>`)}
      </select>
    </${Field}>
    <${Field} label=${t('admin.join.hours')} hint=${t('admin.join.hoursHint')}>
      <input type="number" name="expires_in_hours" min="1" max="8760" step="1" value=${hours} onInput=${(e) => setHours(e.target.value)} />
    </${Field}>
    <${Field} label=${t('admin.join.uses')}>
      <input type="number" name="max_uses" min="1" max="10000" step="1" required value=${uses} onInput=${(e) => setUses(e.target.value)} />
    </${Field}>
    <${ErrorBox} error=${error} />
    <div class="buttons"><button type="submit" class="primary" disabled=${busy || !chosen}>${t('admin.join.submit')}</button></div>
  </form>`;
}

function AddRegion({ onAdded }) {
  const [id, setId] = useState('');
  const [name, setName] = useState('');
  const { busy, error, run } = useAction();
  const submit = (e) => {
    e.preventDefault();
    run(async () => {
      await api.post('/v1/admin/regions', { id: id.trim(), name: name.trim() });
      setId('');
      setName('');
      onAdded();
    });
  };
  return html`<details class="card">
    <summary>${t('admin.join.newRegion')}</summary>
    <form class="card narrow" onSubmit=${submit}>
      <${Field} label=${t('admin.join.regionId')} hint=${t('admin.join.regionIdHint')}>
        <input type="text" name="region_id" required maxlength="32" pattern="[a-z0-9\\-]+" value=${id} onInput=${(e) => setId(e.target.value)} />
      </${Field}>
      <${Field} label=${t('admin.join.regionName')}>
        <input type="text" name="region_name" required maxlength="100" value=${name} onInput=${(e) => setName(e.target.value)} />
      </${Field}>
      <${ErrorBox} error=${error} />
      <div class="buttons"><button type="submit" disabled=${busy}>${t('admin.join.addRegion')}</button></div>
    </form>
  </details>`;
}

export default function JoinTokens() {
  const tokens = useLoad(() => api.all('/v1/admin/join-tokens'), []);
  const regions = useLoad(() => api.get('/v1/admin/regions').then((r) => r.items), []);
  const [created, setCreated] = useState(null);
  const [revoking, setRevoking] = useState(null);
  const [notice, setNotice] = useState(null);
  const revoke = useAction();

  const doRevoke = (e) => {
    e.preventDefault();
    const id = revoking.id;
    revoke.run(async () => {
      await api.del(`/v1/admin/join-tokens/${id}`);
      setRevoking(null);
      setNotice(t('admin.join.revoked', { id }));
      tokens.reload(true);
    });
  };
  const list = tokens.data || [];
  const columns = [
    { key: 'id', label: t('admin.join.col.id'), render: (j) => html`<code data-token=${j.id}>${j.id}</code>` },
    { key: 'region', label: t('admin.join.col.region') },
    { key: 'created', label: t('admin.join.col.created'), render: (j) => fmtDateTime(j.created_at) },
    { key: 'expires', label: t('admin.join.col.expires'), render: (j) => fmtDateTime(j.expires_at) },
    { key: 'uses', label: t('admin.join.col.uses'), render: (j) => html`${fmtNumber(j.uses)} / ${j.max_uses === null ? t('admin.join.unlimited') : fmtNumber(j.max_uses)}` },
    {
      key: 'actions',
      label: t('admin.common.actions'),
      render: (j) => html`<button type="button" class="small danger" data-action="revoke" aria-label=${t('admin.join.revokeLabel', { id: j.id })}
        onClick=${() => { revoke.setError(null); setRevoking(j); }}>${t('admin.join.revoke')}</button>`,
    },
  ];
  return html`<${Page} title=${t('admin.join.title')}>
    <p>${t('admin.join.intro')}</p>
    <${LoadError} error=${tokens.error || regions.error} />
    ${regions.data
      ? html`<${CreateToken} regions=${regions.data} onCreated=${(c) => { setCreated(c); setNotice(null); tokens.reload(true); }} />
        <${AddRegion} onAdded=${() => regions.reload(true)} />`
      : null}
    ${created
      ? html`<section class="card" aria-live="polite" data-testid="join-secret">
          <h2>${t('admin.join.created', { region: created.region })}</h2>
          <p><strong>${t('admin.join.secretOnce')}</strong></p>
          <p class="cmd"><code data-field="token">${created.token}</code></p>
          <p><${CopyButton} text=${created.token} label=${t('admin.join.copy')} />
            ${' '}<button type="button" onClick=${() => setCreated(null)}>${t('admin.common.close')}</button></p>
          <p class="muted"><code>${created.id}</code> · ${fmtDateTime(created.expires_at)}</p>
        </section>`
      : null}
    ${notice ? html`<p class="notice" role="status">${notice}</p>` : null}
    <h2>${t('admin.join.list')}</h2>
    ${tokens.loading && !tokens.data ? html`<${Spinner} />` : null}
    ${tokens.data ? html`<div data-testid="join-tokens-table"><${Table} columns=${columns} rows=${list} empty=${t('admin.join.empty')} caption=${t('admin.join.list')} /></div>` : null}
    ${revoking
      ? html`<${Dialog} open=${true} title=${t('admin.join.revokeTitle', { id: revoking.id })} onClose=${() => setRevoking(null)}>
          <form onSubmit=${doRevoke}>
            <p>${t('admin.join.revokeText')}</p>
            <${ErrorBox} error=${revoke.error} />
            <div class="buttons">
              <button type="button" onClick=${() => setRevoking(null)}>${t('admin.common.cancel')}</button>
              <button type="submit" class="danger" disabled=${revoke.busy}>${t('admin.join.revoke')}</button>
            </div>
          </form>
        </${Dialog}>`
      : null}
  </${Page}>`;
}
