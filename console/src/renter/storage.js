// Your file storage: the directory of each region mounted at /root/storage
// (and /root/autodl-fs) in every instance of yours there, with its use,
// quota, free size, price and what it costs per day now.
import { html } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtBytes, fmtMoney, fmtDateTime } from '../lib/format.js';
import { Page, ErrorBox, Table, useLoad } from '../lib/components.js';

addMessages({
  en: {
    'st.title': 'File storage',
    'st.region': 'Region',
    'st.path': 'Path inside',
    'st.used': 'Used',
    'st.quota': 'Quota',
    'st.free': 'Free size',
    'st.price': 'Price over the free size',
    'st.per_gib_day': '/GiB·day',
    'st.reported': 'Reported',
    'st.empty': 'No file storage yet: your first instance in a region makes it, at /root/storage.',
    'st.about':
      'Every instance of yours in a region sees the same files at /root/storage (also /root/autodl-fs). A write past the quota fails inside with “No space left on device”.',
    'st.per_day': 'Cost per day now',
    'st.billed':
      'The use over the free size is billed per GiB·day, in whole MiB, from the moment a host reports it (a fall in use counts from the report before). It is listed in your bill as file storage.',
  },
  zh: {
    'st.title': '文件存储',
    'st.region': '地区',
    'st.path': '实例内路径',
    'st.used': '已用',
    'st.quota': '容量上限',
    'st.free': '免费额度',
    'st.price': '超出免费额度的价格',
    'st.per_gib_day': '/GiB·天',
    'st.reported': '统计时间',
    'st.empty': '还没有文件存储：在某地区创建第一台实例时自动开通，挂载在 /root/storage。',
    'st.about': '同一地区的所有实例在 /root/storage（及 /root/autodl-fs）看到同一份文件。写入超过容量上限时，实例内会报“No space left on device”。',
    'st.per_day': '当前每天费用',
    'st.billed': '超出免费额度的用量按 GiB·天计费，以整 MiB 计，从主机报告用量的时刻起算（用量减少从上一次报告起算）。账单中列为“文件存储”。',
  },
});

export default function Storage() {
  const st = useLoad(() => api.all('/v1/storage', {}, 100), []);
  const cols = [
    { key: 'region', label: t('st.region') },
    { key: 'path', label: t('st.path'), render: (s) => html`<code>${s.path}</code>` },
    { key: 'used_bytes', label: t('st.used'), class: 'num', render: (s) => fmtBytes(s.used_bytes) },
    { key: 'quota_bytes', label: t('st.quota'), class: 'num', render: (s) => fmtBytes(s.quota_bytes) },
    { key: 'free_bytes', label: t('st.free'), class: 'num', render: (s) => fmtBytes(s.free_bytes) },
    { key: 'price', label: t('st.price'), class: 'num', render: (s) => fmtMoney(s.price_per_gib_day_micros) + t('st.per_gib_day') },
    { key: 'per_day', label: t('st.per_day'), class: 'num', render: (s) => fmtMoney(s.per_day_micros || 0) },
    { key: 'used_at', label: t('st.reported'), render: (s) => (s.used_at ? fmtDateTime(s.used_at) : '—') },
  ];
  const billed = st.data && st.data.some((s) => s.billed);
  return html`<${Page} title=${t('st.title')}>
    <p class="muted">${t('st.about')}</p>
    <${ErrorBox} error=${st.error} />
    <${Table} columns=${cols} rows=${st.data} error=${st.error} rowKey=${(s) => s.region} empty=${t('st.empty')} caption=${t('st.title')} />
    ${st.data && st.data.length && billed ? html`<p class="muted" id="storage-billing">${t('st.billed')}</p>` : null}
  <//>`;
}
