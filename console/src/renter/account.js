// The account: who you are, real-name verification and its state, and the
// default idle stop of your instances.
import { html, useState, useEffect } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtDateTime, fmtDuration } from '../lib/format.js';
import { Page, ErrorBox, Field, Badge, Spinner, useLoad } from '../lib/components.js';

addMessages({
  en: {
    'acct.title': 'Account',
    'acct.email': 'Email',
    'acct.name': 'Name',
    'acct.role': 'Role',
    'acct.since': 'Registered',
    'acct.can_start': 'May start instances',
    'acct.yes': 'yes',
    'acct.no': 'no',
    'ver.title': 'Real-name verification',
    'ver.state.none': 'not submitted',
    'ver.state.pending': 'pending review',
    'ver.state.approved': 'approved',
    'ver.state.rejected': 'rejected',
    'ver.need': 'Starting instances needs an approved real-name verification. Submit your name and ID number; an operator reviews it.',
    'ver.pending': 'Submitted {time}; an operator reviews it. This page updates when it is decided.',
    'ver.approved': 'Verified as {name} ({id}).',
    'ver.rejected': 'Rejected: {reason}. Correct the details and submit again.',
    'ver.real_name': 'Real name',
    'ver.id_number': 'ID number',
    'ver.id_hint': 'An 18-character resident ID; it is kept only as a keyed hash and a masked copy.',
    'ver.submit': 'Submit for review',
    'idle.title': 'Idle stop (default for all instances)',
    'idle.off': 'Off: instances run until you stop them.',
    'idle.on': 'Instances without their own setting stop after {d} without SSH, service traffic or GPU use.',
    'idle.minutes': 'Stop after (minutes, 0 = off)',
    'idle.save': 'Save',
    'idle.saved': 'Saved.',
  },
  zh: {
    'acct.title': '账号',
    'acct.email': '邮箱',
    'acct.name': '名字',
    'acct.role': '角色',
    'acct.since': '注册时间',
    'acct.can_start': '可以开机',
    'acct.yes': '是',
    'acct.no': '否',
    'ver.title': '实名认证',
    'ver.state.none': '未提交',
    'ver.state.pending': '审核中',
    'ver.state.approved': '已认证',
    'ver.state.rejected': '未通过',
    'ver.need': '开机需要通过实名认证。请提交姓名和身份证号，运营人员审核。',
    'ver.pending': '已于 {time} 提交，等待审核。审核结果出来后本页自动更新。',
    'ver.approved': '已认证：{name}（{id}）。',
    'ver.rejected': '未通过：{reason}。请修改后重新提交。',
    'ver.real_name': '真实姓名',
    'ver.id_number': '身份证号',
    'ver.id_hint': '18 位居民身份证号；只保存带密钥的哈希和打码后的号码。',
    'ver.submit': '提交审核',
    'idle.title': '闲置关机（所有实例的默认值）',
    'idle.off': '关闭：实例一直运行，直到你关机。',
    'idle.on': '未单独设置的实例在 {d} 内没有 SSH、服务访问或 GPU 使用时自动关机。',
    'idle.minutes': '闲置多久后关机（分钟，0 为关闭）',
    'idle.save': '保存',
    'idle.saved': '已保存。',
  },
});

const stateKind = { none: 'muted', pending: 'warn', approved: 'ok', rejected: 'bad' };

function Verification({ me, setMe }) {
  const v = useLoad(() => api.get('/v1/me/verification').catch((e) => (e.code === 'no_verification' ? null : Promise.reject(e))), []);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const state = v.data ? v.data.state : me.verification;
  // The decision has no stream event: ask again every 15 s while pending.
  useEffect(() => {
    if (state !== 'pending') return;
    const id = setInterval(async () => {
      await v.reload();
      api.get('/v1/me').then(setMe, () => {});
    }, 15000);
    return () => clearInterval(id);
  }, [state]);
  const submit = async (e) => {
    e.preventDefault();
    const f = e.target;
    setBusy(true);
    setError(null);
    try {
      const r = await api.post('/v1/me/verification', { real_name: f.real_name.value.trim(), id_number: f.id_number.value.trim() });
      v.setData(r);
      setMe({ ...me, verification: r.state });
    } catch (err) {
      setError(err);
    }
    setBusy(false);
  };
  return html`<section class="card" aria-labelledby="ver-h">
    <h2 id="ver-h">${t('ver.title')} <${Badge} kind=${stateKind[state] || 'muted'}>${t('ver.state.' + (state || 'none'))}<//></h2>
    ${v.loading && v.data === undefined ? html`<${Spinner} />` : null}
    <${ErrorBox} error=${v.error} />
    ${state === 'pending' && v.data ? html`<p>${t('ver.pending', { time: fmtDateTime(v.data.created_at) })}</p>` : null}
    ${state === 'approved' && v.data ? html`<p>${t('ver.approved', { name: v.data.real_name, id: v.data.id_number_masked })}</p>` : null}
    ${state === 'rejected' && v.data ? html`<p class="warnbox">${t('ver.rejected', { reason: v.data.reason })}</p>` : null}
    ${!v.loading && (state === 'none' || state === 'rejected' || !state)
      ? html`${state !== 'rejected' ? html`<p>${t('ver.need')}</p>` : null}
          <form class="narrow" onSubmit=${submit} id="verification-form">
            <${Field} label=${t('ver.real_name')}><input name="real_name" autocomplete="name" required maxlength="100" /><//>
            <${Field} label=${t('ver.id_number')} hint=${t('ver.id_hint')}>
              <input name="id_number" autocomplete="off" required maxlength="64" spellcheck="false" />
            <//>
            <${ErrorBox} error=${error} />
            <button type="submit" class="primary" disabled=${busy}>${t('ver.submit')}</button>
          </form>`
      : null}
  </section>`;
}

function IdleDefault() {
  const d = useLoad(() => api.get('/v1/me/idle-stop'), []);
  const [error, setError] = useState(null);
  const [saved, setSaved] = useState(false);
  if (d.data === undefined) return html`<section class="card"><${ErrorBox} error=${d.error} /><${Spinner} /></section>`;
  const cur = d.data.after_seconds;
  const submit = async (e) => {
    e.preventDefault();
    setError(null);
    setSaved(false);
    const min = Number(e.target.minutes.value);
    try {
      d.setData(await api.post('/v1/me/idle-stop', { after_seconds: Math.round(min * 60) }));
      setSaved(true);
    } catch (err) {
      setError(err);
    }
  };
  return html`<section class="card" aria-labelledby="idle-h">
    <h2 id="idle-h">${t('idle.title')}</h2>
    <p>${cur ? t('idle.on', { d: fmtDuration(cur) }) : t('idle.off')}</p>
    <form class="narrow" onSubmit=${submit}>
      <${Field} label=${t('idle.minutes')}>
        <input type="number" name="minutes" min="0" step="1" value=${cur ? Math.round(cur / 60) : 0} />
      <//>
      <${ErrorBox} error=${error} />
      <button type="submit">${t('idle.save')}</button> ${saved ? html`<span role="status">${t('idle.saved')}</span>` : null}
    </form>
  </section>`;
}

export default function Account({ me, setMe }) {
  return html`<${Page} title=${t('acct.title')}>
    <section class="card">
      <dl class="kv">
        <dt>${t('acct.email')}</dt><dd>${me.email}</dd>
        <dt>${t('acct.name')}</dt><dd>${me.name || '—'}</dd>
        <dt>${t('acct.role')}</dt><dd>${me.role}</dd>
        <dt>${t('acct.since')}</dt><dd>${fmtDateTime(me.created_at)}</dd>
        <dt>${t('acct.can_start')}</dt><dd>${me.can_start_instances ? t('acct.yes') : t('acct.no')}</dd>
      </dl>
    </section>
    <${Verification} me=${me} setMe=${setMe} />
    <${IdleDefault} />
  <//>`;
}
