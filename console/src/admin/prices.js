// The price history: every price row ever set (GET /v1/admin/prices),
// newest first, GPU models by name, with the row now in effect for each item
// and region marked (the newest whose effective_from has come).
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';
import { fmtMoney, fmtNumber, fmtDateTime } from '../lib/format.js';
import { Page, Spinner, Badge, Table, Field } from '../lib/components.js';
import { useLoad, LoadError } from './common.js';

addMessages({
  en: {
    'admin.prices.title': 'Price history',
    'admin.prices.item': 'Item',
    'admin.prices.region': 'Region',
    'admin.prices.all': 'all',
    'admin.prices.default': 'default',
    'admin.prices.col.item': 'Item',
    'admin.prices.col.region': 'Region',
    'admin.prices.col.amount': 'Price',
    'admin.prices.col.free': 'Free GiB',
    'admin.prices.col.from': 'In effect from',
    'admin.prices.col.by': 'Set by',
    'admin.prices.now': 'in effect',
    'admin.prices.seeded': 'sample catalog',
    'admin.prices.item.nogpu': 'No-GPU mode / hour',
    'admin.prices.item.data_disk': 'Data disk / GiB-day',
    'admin.prices.item.file_storage': 'File storage / GiB-day',
    'admin.prices.item.image_storage': 'Saved images / GiB-day',
    'admin.prices.item.gpu': '{name} / GPU-hour',
    'admin.prices.empty': 'No price matches.',
    'admin.prices.list': 'Prices, newest first',
  },
  zh: {
    'admin.prices.title': '价格历史',
    'admin.prices.item': '项目',
    'admin.prices.region': '地区',
    'admin.prices.all': '全部',
    'admin.prices.default': '默认',
    'admin.prices.col.item': '项目',
    'admin.prices.col.region': '地区',
    'admin.prices.col.amount': '价格',
    'admin.prices.col.free': '免费 GiB',
    'admin.prices.col.from': '生效时间',
    'admin.prices.col.by': '设置人',
    'admin.prices.now': '当前生效',
    'admin.prices.seeded': '示例目录',
    'admin.prices.item.nogpu': '无卡模式 / 小时',
    'admin.prices.item.data_disk': '数据盘 / GiB·天',
    'admin.prices.item.file_storage': '文件存储 / GiB·天',
    'admin.prices.item.image_storage': '保存的镜像 / GiB·天',
    'admin.prices.item.gpu': '{name} / 卡·小时',
    'admin.prices.empty': '没有匹配的价格。',
    'admin.prices.list': '价格（最新在前）',
  },
});

// The seq of the row in effect now for each item and region.
export function inEffect(rows, now = Date.now()) {
  const best = new Map();
  for (const r of rows) {
    if (new Date(r.effective_from).getTime() > now) continue;
    const k = r.item + '|' + r.region;
    const b = best.get(k);
    if (!b || r.effective_from > b.effective_from || (r.effective_from === b.effective_from && r.seq > b.seq)) best.set(k, r);
  }
  return new Set([...best.values()].map((r) => r.seq));
}

export default function Prices() {
  const data = useLoad(() => Promise.all([
    api.all('/v1/admin/prices'),
    api.get('/v1/admin/gpu-models').then((r) => r.items),
  ]), []);
  const [item, setItem] = useState('');
  const [region, setRegion] = useState('*');
  const [rows, models] = data.data || [[], []];
  const names = new Map(models.map((m) => [m.id, m.name]));
  const label = (it) => (it.startsWith('gpu:')
    ? t('admin.prices.item.gpu', { name: names.get(it.slice(4)) || it.slice(4) })
    : t('admin.prices.item.' + it));
  const items = [...new Set(rows.map((r) => r.item))];
  const regions = [...new Set(rows.map((r) => r.region))].sort();
  const effective = inEffect(rows);
  const shown = rows
    .filter((r) => (!item || r.item === item) && (region === '*' || r.region === region))
    .slice()
    .sort((a, b) => (a.effective_from < b.effective_from ? 1 : a.effective_from > b.effective_from ? -1 : b.seq - a.seq));
  const cols = [
    { key: 'item', label: t('admin.prices.col.item'), render: (r) => label(r.item) },
    { key: 'region', label: t('admin.prices.col.region'), render: (r) => r.region || t('admin.prices.default') },
    { key: 'amount', label: t('admin.prices.col.amount'), class: 'num', render: (r) => fmtMoney(r.amount_micros) },
    { key: 'free', label: t('admin.prices.col.free'), class: 'num', render: (r) => (r.item === 'data_disk' || r.item === 'file_storage' || r.item === 'image_storage' ? fmtNumber(r.free_gib) : '—') },
    {
      key: 'from',
      label: t('admin.prices.col.from'),
      render: (r) => html`${fmtDateTime(r.effective_from)}${effective.has(r.seq) ? html` <${Badge} kind="ok">${t('admin.prices.now')}</${Badge}>` : null}`,
    },
    { key: 'by', label: t('admin.prices.col.by'), render: (r) => (r.created_by ? html`<code>${r.created_by}</code>` : t('admin.prices.seeded')) },
  ];
  return html`<${Page} title=${t('admin.prices.title')}>
    <div class="filters">
      <${Field} label=${t('admin.prices.item')}>
        <select name="item" value=${item} onChange=${(e) => setItem(e.target.value)}>
          <option value="">${t('admin.prices.all')}</option>
          ${items.map((i) => html`<option key=${i} value=${i}>${label(i)}</option>`)}
        </select>
      </${Field}>
      <${Field} label=${t('admin.prices.region')}>
        <select name="region" value=${region} onChange=${(e) => setRegion(e.target.value)}>
          <option value="*">${t('admin.prices.all')}</option>
          ${regions.map((r) => html`<option key=${r} value=${r}>${r || t('admin.prices.default')}</option>`)}
        </select>
      </${Field}>
    </div>
    <${LoadError} error=${data.error} />
    ${data.loading && !data.data ? html`<${Spinner} />` : null}
    ${data.data ? html`<${Table} columns=${cols} rows=${shown} rowKey=${(r) => r.seq} empty=${t('admin.prices.empty')} caption=${t('admin.prices.list')} />` : null}
  </${Page}>`;
}
