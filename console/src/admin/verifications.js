// The verification queue: real-name requests, oldest first, pending by
// default; approve, or reject with a reason the renter can act on.
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';
import { fmtDateTime } from '../lib/format.js';
import { Page, ErrorBox, Dialog, Field, Spinner, Badge, Table } from '../lib/components.js';
import { useLoad, useAction, LoadError } from './common.js';

addMessages({
  en: {
    'admin.ver.title': 'Verification queue',
    'admin.ver.show': 'Show',
    'admin.ver.state.pending': 'pending',
    'admin.ver.state.approved': 'approved',
    'admin.ver.state.rejected': 'rejected',
    'admin.ver.state.all': 'all',
    'admin.ver.empty.pending': 'Nobody is waiting for verification.',
    'admin.ver.empty': 'No request in this list.',
    'admin.ver.col.user': 'User',
    'admin.ver.col.name': 'Real name',
    'admin.ver.col.id': 'ID number',
    'admin.ver.col.submitted': 'Submitted',
    'admin.ver.col.state': 'State',
    'admin.ver.approve': 'Approve',
    'admin.ver.approveLabel': 'Approve {email}',
    'admin.ver.reject': 'Reject',
    'admin.ver.rejectLabel': 'Reject {email}',
    'admin.ver.rejectTitle': 'Reject the request of {email}',
    'admin.ver.reason': 'Reason',
    'admin.ver.reasonHint': 'The renter sees it: say what to correct, e.g. "the name does not match the ID number".',
    'admin.ver.reasonMissing': 'Enter the reason the renter will see.',
    'admin.ver.approved': '{email} is verified.',
    'admin.ver.rejected': 'The request of {email} was rejected.',
    'admin.ver.decided': 'Decided {time}',
    'admin.ver.list': 'Verification requests',
  },
  zh: {
    'admin.ver.title': '实名审核',
    'admin.ver.show': '显示',
    'admin.ver.state.pending': '待审核',
    'admin.ver.state.approved': '已通过',
    'admin.ver.state.rejected': '已拒绝',
    'admin.ver.state.all': '全部',
    'admin.ver.empty.pending': '没有等待审核的申请。',
    'admin.ver.empty': '列表中没有申请。',
    'admin.ver.col.user': '用户',
    'admin.ver.col.name': '真实姓名',
    'admin.ver.col.id': '证件号码',
    'admin.ver.col.submitted': '提交时间',
    'admin.ver.col.state': '状态',
    'admin.ver.approve': '通过',
    'admin.ver.approveLabel': '通过 {email}',
    'admin.ver.reject': '拒绝',
    'admin.ver.rejectLabel': '拒绝 {email}',
    'admin.ver.rejectTitle': '拒绝 {email} 的申请',
    'admin.ver.reason': '原因',
    'admin.ver.reasonHint': '租户会看到：请说明需要更正的内容，例如“姓名与证件号码不符”。',
    'admin.ver.reasonMissing': '请填写租户将看到的原因。',
    'admin.ver.approved': '{email} 已通过实名认证。',
    'admin.ver.rejected': '已拒绝 {email} 的申请。',
    'admin.ver.decided': '审核于 {time}',
    'admin.ver.list': '实名申请',
  },
});

const KIND = { pending: 'warn', approved: 'ok', rejected: 'bad' };

export default function Verifications() {
  const [state, setState] = useState('pending');
  const list = useLoad(() => api.all('/v1/admin/verifications', { state }), [state], { poll: 30000 });
  const [rejecting, setRejecting] = useState(null);
  const [reason, setReason] = useState('');
  const [notice, setNotice] = useState(null);
  const act = useAction();

  const approve = (v) => act.run(async () => {
    await api.post(`/v1/admin/users/${v.user_id}/verification`, { approve: true });
    setNotice(t('admin.ver.approved', { email: v.email }));
    list.reload(true);
  });
  const reject = (e) => {
    e.preventDefault();
    const v = rejecting;
    if (!reason.trim()) return act.setError(new Error(t('admin.ver.reasonMissing')));
    return act.run(async () => {
      await api.post(`/v1/admin/users/${v.user_id}/verification`, { approve: false, reason: reason.trim() });
      setRejecting(null);
      setReason('');
      setNotice(t('admin.ver.rejected', { email: v.email }));
      list.reload(true);
    });
  };
  const items = list.data || [];
  const columns = [
    { key: 'user', label: t('admin.ver.col.user'), render: (v) => html`<span data-user=${v.user_id}>${v.email}</span><div class="muted"><code>${v.user_id}</code></div>` },
    { key: 'real_name', label: t('admin.ver.col.name') },
    { key: 'id', label: t('admin.ver.col.id'), render: (v) => html`<code>${v.id_number_masked}</code>` },
    { key: 'created', label: t('admin.ver.col.submitted'), render: (v) => fmtDateTime(v.created_at) },
    {
      key: 'state',
      label: t('admin.ver.col.state'),
      render: (v) => html`<${Badge} kind=${KIND[v.state]}>${t('admin.ver.state.' + v.state)}</${Badge}>
        ${v.reason ? html`<div class="muted">${v.reason}</div>` : null}
        ${v.decided_at ? html`<div class="muted">${t('admin.ver.decided', { time: fmtDateTime(v.decided_at) })}</div>` : null}`,
    },
    {
      key: 'actions',
      label: t('admin.common.actions'),
      render: (v) => (v.state === 'pending'
        ? html`<div class="row-actions">
            <button type="button" class="small primary" data-action="approve" disabled=${act.busy}
              aria-label=${t('admin.ver.approveLabel', { email: v.email })} onClick=${() => approve(v)}>${t('admin.ver.approve')}</button>
            <button type="button" class="small danger" data-action="reject" disabled=${act.busy}
              aria-label=${t('admin.ver.rejectLabel', { email: v.email })}
              onClick=${() => { act.setError(null); setReason(''); setRejecting(v); }}>${t('admin.ver.reject')}</button>
          </div>`
        : null),
    },
  ];
  return html`<${Page} title=${t('admin.ver.title')}>
    <div class="filters">
      <label>${t('admin.ver.show')}${' '}
        <select name="state" value=${state} onChange=${(e) => setState(e.target.value)}>
          ${['pending', 'approved', 'rejected', 'all'].map((s) => html`<option key=${s} value=${s}>${t('admin.ver.state.' + s)}</option>`)}
        </select>
      </label>
      <button type="button" onClick=${() => list.reload()} disabled=${list.loading}>${t('admin.common.refresh')}</button>
    </div>
    <${LoadError} error=${list.error} />
    ${rejecting ? null : html`<${ErrorBox} error=${act.error} />`}
    ${notice ? html`<p class="notice" role="status">${notice}</p>` : null}
    ${list.loading && !list.data ? html`<${Spinner} />` : null}
    ${list.data ? html`<div data-testid="verifications-table"><${Table} columns=${columns} rows=${items} caption=${t('admin.ver.list')}
      empty=${t(state === 'pending' ? 'admin.ver.empty.pending' : 'admin.ver.empty')} /></div>` : null}
    ${rejecting
      ? html`<${Dialog} open=${true} title=${t('admin.ver.rejectTitle', { email: rejecting.email })} onClose=${() => setRejecting(null)}>
          <form onSubmit=${reject}>
            <${Field} label=${t('admin.ver.reason')} hint=${t('admin.ver.reasonHint')}>
              <textarea name="reason" required maxlength="500" rows="3" value=${reason} onInput=${(e) => setReason(e.target.value)}></textarea>
            </${Field}>
            <${ErrorBox} error=${act.error} />
            <div class="buttons">
              <button type="button" onClick=${() => setRejecting(null)}>${t('admin.common.cancel')}</button>
              <button type="submit" class="danger" disabled=${act.busy}>${t('admin.ver.reject')}</button>
            </div>
          </form>
        </${Dialog}>`
      : null}
  </${Page}>`;
}
