// Everything that happened to your instances and account, newest first,
// with new events arriving live.
import { html, useState, useEffect } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtDateTime } from '../lib/format.js';
import { Page, ErrorBox, Field, Table, useLoad } from '../lib/components.js';
import { onStream } from '../lib/events.js';
import { Link } from '../lib/router.js';
import { stateText } from './common.js';

addMessages({
  en: {
    'ev.title': 'Events',
    'ev.time': 'Time',
    'ev.instance': 'Instance',
    'ev.kind': 'Event',
    'ev.state': 'State',
    'ev.message': 'Message',
    'ev.account': 'account',
    'ev.filter': 'Only this kind',
    'ev.all': 'All kinds',
    'ev.live': 'Live',
    'ev.polling': 'Updating every 10 s',
    'ev.empty': 'Nothing has happened yet.',
  },
  zh: {
    'ev.title': '事件',
    'ev.time': '时间',
    'ev.instance': '实例',
    'ev.kind': '事件',
    'ev.state': '状态',
    'ev.message': '说明',
    'ev.account': '账号',
    'ev.filter': '只看此类',
    'ev.all': '全部',
    'ev.live': '实时',
    'ev.polling': '每 10 秒刷新',
    'ev.empty': '暂无事件。',
  },
});

const KINDS = ['create', 'start', 'stop', 'restart', 'release', 'running', 'stopped', 'released', 'failed', 'plan', 'plan_renewed',
  'plan_ended', 'plan_not_renewed', 'balance_stop', 'balance_low', 'release_warning', 'auto_release', 'idle_warning', 'idle_stop',
  'stop_scheduled', 'host_back', 'clone', 'copying', 'copied'];

export default function Events() {
  const [kind, setKind] = useState('');
  const [status, setStatus] = useState('');
  const ev = useLoad(() => api.all('/v1/events', kind ? { kind } : {}, 5000), [kind]);
  useEffect(() => onStream('status', setStatus), []);
  useEffect(
    () =>
      onStream('event', (e) => {
        if (kind && e.kind !== kind) return;
        ev.setData((items) => (items && !items.some((x) => x.seq === e.seq) ? [...items, e] : items));
      }),
    [kind],
  );
  const rows = ev.data ? ev.data.slice(-500).reverse() : undefined;
  const cols = [
    { key: 'created_at', label: t('ev.time'), render: (e) => fmtDateTime(e.created_at) },
    {
      key: 'instance_id',
      label: t('ev.instance'),
      render: (e) => (e.instance_id ? html`<${Link} href=${'/instances/' + e.instance_id} class="mono">${e.instance_id}<//>` : html`<span class="muted">${t('ev.account')}</span>`),
    },
    { key: 'kind', label: t('ev.kind'), render: (e) => html`<code>${e.kind}</code>${e.reason ? html` <span class="muted">${e.reason}</span>` : null}` },
    { key: 'state', label: t('ev.state'), render: (e) => stateText(e.state) },
    { key: 'message', label: t('ev.message') },
  ];
  return html`<${Page} title=${t('ev.title')} actions=${status ? html`<span class=${'badge ' + (status === 'live' ? 'ok' : 'muted')}>${status === 'live' ? t('ev.live') : t('ev.polling')}</span>` : null}>
    <form class="filters" onSubmit=${(e) => e.preventDefault()}>
      <${Field} label=${t('ev.filter')}>
        <select value=${kind} onChange=${(e) => setKind(e.target.value)}>
          <option value="">${t('ev.all')}</option>
          ${KINDS.map((k) => html`<option value=${k}>${k}</option>`)}
        </select>
      <//>
    </form>
    <${ErrorBox} error=${ev.error} />
    <${Table} columns=${cols} rows=${rows} error=${ev.error} rowKey=${(e) => e.seq} empty=${t('ev.empty')} caption=${t('ev.title')} />
  <//>`;
}
