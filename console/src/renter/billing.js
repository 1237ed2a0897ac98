// Money: the balance and how long it lasts, a month's bill per day as a
// chart (plain SVG), per instance and per kind, its charges, and CSV
// downloads built here from the JSON routes (the API has no CSV route; the
// columns match `suanli bill -o csv` and `suanli bill charges -o csv`).
import { html, useState, useEffect } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtMoney, fmtDate, fmtDateTime, fmtDuration, setDefaultCurrency } from '../lib/format.js';
import { Page, ErrorBox, Field, Table, Spinner, useLoad } from '../lib/components.js';
import { onStream } from '../lib/events.js';

addMessages({
  en: {
    'bill.title': 'Billing',
    'bill.balance': 'Balance',
    'bill.spend': 'Spending now',
    'bill.per_hour': '{amount} / hour',
    'bill.covers': 'Lasts',
    'bill.covers_none': 'nothing is billed now',
    'bill.covers_zero': 'used up: top up to start instances',
    'bill.topup': 'To top up, ask your operator: money arrives through their payment gateway or as an operator’s credit.',
    'bill.month': 'Month',
    'bill.chart': 'Charges per day',
    'bill.chart_label': 'Charges per day in {month}: {total} in all, the most on {day} ({max}).',
    'bill.chart_empty': 'No charges in {month}.',
    'bill.total': 'Total',
    'bill.by_instance': 'Per instance',
    'bill.by_kind': 'Per kind',
    'bill.day': 'Day',
    'bill.instance': 'Instance',
    'bill.kind': 'Kind',
    'bill.amount': 'Amount',
    'bill.charges': 'Charges',
    'bill.seconds': 'Metered',
    'bill.charges_title': 'Charges',
    'bill.from': 'From',
    'bill.to': 'To',
    'bill.open': 'so far: its day is not over',
    'bill.csv_days': 'Download the bill (CSV)',
    'bill.csv_charges': 'Download the charges (CSV)',
    'bill.kind.gpu': 'GPU', 'bill.kind.nogpu': 'no GPU', 'bill.kind.data_disk': 'data disk', 'bill.kind.file_storage': 'file storage', 'bill.kind.image_storage': 'saved images', 'bill.kind.plan': 'plan', 'bill.kind.plan_refund': 'plan refund',
    'bill.more': 'Showing the latest {n} of {all}; the CSV has them all.',
    'bill.renter_wide': 'file storage and saved images',
  },
  zh: {
    'bill.title': '费用中心',
    'bill.balance': '余额',
    'bill.spend': '当前消费',
    'bill.per_hour': '{amount} / 小时',
    'bill.covers': '预计可用',
    'bill.covers_none': '当前没有计费项',
    'bill.covers_zero': '已用完：充值后才能开机',
    'bill.topup': '充值请联系运营方：款项通过其支付渠道到账，或由运营人员为账号充值。',
    'bill.month': '月份',
    'bill.chart': '每日费用',
    'bill.chart_label': '{month} 每日费用：合计 {total}，最多的一天是 {day}（{max}）。',
    'bill.chart_empty': '{month} 没有费用。',
    'bill.total': '合计',
    'bill.by_instance': '按实例',
    'bill.by_kind': '按类型',
    'bill.day': '日期',
    'bill.instance': '实例',
    'bill.kind': '类型',
    'bill.amount': '金额',
    'bill.charges': '笔数',
    'bill.seconds': '计费时长',
    'bill.charges_title': '扣费明细',
    'bill.from': '开始',
    'bill.to': '结束',
    'bill.open': '截至目前：当天未结束',
    'bill.csv_days': '下载账单（CSV）',
    'bill.csv_charges': '下载扣费明细（CSV）',
    'bill.kind.gpu': 'GPU', 'bill.kind.nogpu': '无卡', 'bill.kind.data_disk': '数据盘', 'bill.kind.file_storage': '文件存储', 'bill.kind.image_storage': '保存的镜像', 'bill.kind.plan': '套餐', 'bill.kind.plan_refund': '套餐退款',
    'bill.more': '显示最近 {n} 笔，共 {all} 笔；CSV 包含全部。',
    'bill.renter_wide': '文件存储与保存的镜像',
  },
});

const KINDS = ['gpu', 'nogpu', 'data_disk', 'file_storage', 'image_storage', 'plan', 'plan_refund'];

// micros -> "12.50", "0.000123", "-3.00": exact, no currency symbol.
export function csvMoney(micros) {
  const neg = micros < 0;
  let a = BigInt(Math.abs(Math.trunc(micros)));
  const units = a / 1000000n;
  let frac = (a % 1000000n).toString().padStart(6, '0').replace(/0+$/, '');
  while (frac.length < 2) frac += '0';
  return (neg ? '-' : '') + units.toString() + '.' + frac;
}

export function csvRecord(fields) {
  return fields
    .map((f) => {
      const s = f === null || f === undefined ? '' : String(f);
      return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    })
    .join(',');
}

export function billCsv(bill) {
  const lines = [csvRecord(['day', ...KINDS, 'amount', 'charges', 'seconds'])];
  let n = 0;
  let secs = 0;
  const sums = {};
  for (const r of bill.rows) {
    lines.push(csvRecord([r.day || r.key, ...KINDS.map((k) => csvMoney(r.by_kind[k] || 0)), csvMoney(r.amount_micros), r.charges, r.seconds]));
    n += r.charges;
    secs += r.seconds;
    for (const k of KINDS) sums[k] = (sums[k] || 0) + (r.by_kind[k] || 0);
  }
  lines.push(csvRecord(['total', ...KINDS.map((k) => csvMoney(sums[k])), csvMoney(bill.total_micros), n, secs]));
  return lines.join('\r\n') + '\r\n';
}

export function chargesCsv(items) {
  const lines = [csvRecord(['seq', 'txn_id', 'instance_id', 'kind', 'period_from', 'period_to', 'seconds', 'amount', 'created_at'])];
  for (const c of items)
    lines.push(csvRecord([c.seq, c.txn_id, c.instance_id, c.kind, c.period_from, c.period_to, c.seconds, csvMoney(c.amount_micros), c.created_at]));
  return lines.join('\r\n') + '\r\n';
}

function download(name, text) {
  const url = URL.createObjectURL(new Blob([text], { type: 'text/csv;charset=utf-8' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function thisMonth() {
  return new Date().toISOString().slice(0, 7);
}

function daysIn(month) {
  const [y, m] = month.split('-').map(Number);
  return new Date(Date.UTC(y, m, 0)).getUTCDate();
}

// One bar per day of the month; the bar's height is the day's amount.
export function DayChart({ bill }) {
  const n = daysIn(bill.month);
  const byDay = new Map(bill.rows.map((r) => [r.day || r.key, r.amount_micros]));
  let max = 0;
  let maxDay = null;
  for (const [d, v] of byDay)
    if (v > max) {
      max = v;
      maxDay = d;
    }
  const W = 640;
  const H = 180;
  const pad = { l: 8, r: 8, t: 10, b: 22 };
  const bw = (W - pad.l - pad.r) / n;
  const ih = H - pad.t - pad.b;
  const label = max > 0
    ? t('bill.chart_label', { month: bill.month, total: fmtMoney(bill.total_micros), day: fmtDate(maxDay + 'T00:00:00Z'), max: fmtMoney(max) })
    : t('bill.chart_empty', { month: bill.month });
  const bars = [];
  const ticks = [];
  for (let d = 1; d <= n; d++) {
    const day = `${bill.month}-${String(d).padStart(2, '0')}`;
    const v = byDay.get(day) || 0;
    const h = max > 0 && v > 0 ? Math.max(1.5, (v / max) * ih) : 0;
    const x = pad.l + (d - 1) * bw;
    if (h > 0)
      bars.push(html`<rect class="bar" x=${x + bw * 0.15} y=${pad.t + ih - h} width=${bw * 0.7} height=${h} data-day=${day} data-amount=${v}>
        <title>${day}: ${fmtMoney(v)}</title></rect>`);
    if (d === 1 || d % 5 === 0) ticks.push(html`<text x=${x + bw / 2} y=${H - 6} text-anchor="middle">${d}</text>`);
  }
  return html`<figure class="chart card" style="margin:0 0 1rem">
    <svg viewBox=${`0 0 ${W} ${H}`} role="img" aria-label=${label} id="bill-chart" data-month=${bill.month}>
      <line class="axis" x1=${pad.l} x2=${W - pad.r} y1=${pad.t + ih} y2=${pad.t + ih} />
      ${bars}${ticks}
    </svg>
    <figcaption class="muted">${label}</figcaption>
  </figure>`;
}

function BalanceCard() {
  const b = useLoad(() => api.get('/v1/balance'), []);
  useEffect(() => onStream('balance', () => b.reload()), []);
  useEffect(() => onStream('instance', () => b.reload()), []);
  const x = b.data;
  if (!x) return html`<section class="card"><${ErrorBox} error=${b.error} />${b.error ? null : html`<${Spinner} />`}</section>`;
  setDefaultCurrency(x.currency);
  const covers =
    x.covers_seconds === null ? t('bill.covers_none') : x.covers_seconds === 0 ? t('bill.covers_zero') : fmtDuration(x.covers_seconds);
  return html`<section class="card" aria-label=${t('bill.balance')}>
    <div class="grid">
      <div><div class="muted">${t('bill.balance')}</div><div class="big" id="balance">${fmtMoney(x.balance_micros, x.currency)}</div></div>
      <div><div class="muted">${t('bill.spend')}</div><div class="big">${t('bill.per_hour', { amount: fmtMoney(x.spend_per_hour_micros, x.currency) })}</div></div>
      <div><div class="muted">${t('bill.covers')}</div><div class="big" id="covers">${covers}</div></div>
    </div>
    <p class="hint">${t('bill.topup')}</p>
  </section>`;
}

const SHOW = 200;

export default function Billing() {
  const [month, setMonth] = useState(thisMonth());
  const days = useLoad(() => api.get('/v1/bills', { month, by: 'day' }), [month]);
  const inst = useLoad(() => api.get('/v1/bills', { month, by: 'instance' }), [month]);
  const kinds = useLoad(() => api.get('/v1/bills', { month, by: 'kind' }), [month]);
  const charges = useLoad(() => api.all('/v1/bills/charges', { month }, 100000), [month]);
  useEffect(
    () =>
      onStream('balance', () => {
        days.reload();
        inst.reload();
        kinds.reload();
        charges.reload();
      }),
    [month],
  );
  const money = (r) => fmtMoney(r.amount_micros);
  const instCols = [
    { key: 'name', label: t('bill.instance'), render: (r) => (r.instance_id ? html`${r.name || r.instance_id} <span class="muted mono">${r.instance_id}</span>` : t('bill.renter_wide')) },
    { key: 'amount', label: t('bill.amount'), class: 'num', render: money },
    { key: 'charges', label: t('bill.charges'), class: 'num' },
    { key: 'seconds', label: t('bill.seconds'), class: 'num', render: (r) => fmtDuration(r.seconds) },
  ];
  const kindCols = [
    { key: 'kind', label: t('bill.kind'), render: (r) => t('bill.kind.' + (r.kind || r.key)) },
    { key: 'amount', label: t('bill.amount'), class: 'num', render: money },
    { key: 'charges', label: t('bill.charges'), class: 'num' },
  ];
  const dayCols = [
    { key: 'day', label: t('bill.day'), render: (r) => r.day || r.key },
    { key: 'amount', label: t('bill.amount'), class: 'num', render: money },
    { key: 'charges', label: t('bill.charges'), class: 'num' },
    { key: 'seconds', label: t('bill.seconds'), class: 'num', render: (r) => fmtDuration(r.seconds) },
  ];
  const chargeCols = [
    { key: 'period_from', label: t('bill.from'), render: (c) => fmtDateTime(c.period_from) },
    // an open piece: what a meter is billed past its last whole day's row
    { key: 'period_to', label: t('bill.to'), render: (c) => (c.open ? html`${fmtDateTime(c.period_to)} <span class="hint">(${t('bill.open')})</span>` : fmtDateTime(c.period_to)) },
    { key: 'instance_id', label: t('bill.instance'), render: (c) => (c.instance_id ? html`<span class="mono">${c.instance_id}</span>` : t('bill.renter_wide')) },
    { key: 'kind', label: t('bill.kind'), render: (c) => t('bill.kind.' + c.kind) },
    { key: 'amount', label: t('bill.amount'), class: 'num', render: money },
  ];
  const all = charges.data;
  const shown = all ? all.slice(-SHOW).reverse() : undefined;
  return html`<${Page} title=${t('bill.title')}>
    <${BalanceCard} />
    <form class="filters" onSubmit=${(e) => e.preventDefault()}>
      <${Field} label=${t('bill.month')}>
        <input type="month" name="month" value=${month} max=${thisMonth()} onChange=${(e) => e.target.value && setMonth(e.target.value)} />
      <//>
      <div class="actions">
        <button type="button" disabled=${!days.data} onClick=${() => download(`suanli-bill-${month}.csv`, billCsv(days.data))}>${t('bill.csv_days')}</button>
        <button type="button" disabled=${!all} onClick=${() => download(`suanli-charges-${month}.csv`, chargesCsv(all))}>${t('bill.csv_charges')}</button>
      </div>
    </form>
    <h2>${t('bill.chart')} · ${t('bill.total')} <span id="bill-total">${days.data ? fmtMoney(days.data.total_micros) : '—'}</span></h2>
    <${ErrorBox} error=${days.error} />
    ${days.data ? html`<${DayChart} bill=${days.data} />` : days.error ? null : html`<${Spinner} />`}
    <details>
      <summary>${t('bill.day')}</summary>
      ${days.data ? html`<${Table} columns=${dayCols} rows=${days.data.rows} rowKey=${(r) => r.key} caption=${t('bill.chart')} />` : null}
    </details>
    <div class="grid" style="margin-top:1rem">
      <section aria-labelledby="bi-h"><h2 id="bi-h">${t('bill.by_instance')}</h2><${ErrorBox} error=${inst.error} />
        <${Table} columns=${instCols} rows=${inst.data ? inst.data.rows : undefined} error=${inst.error} rowKey=${(r) => r.key} caption=${t('bill.by_instance')} /></section>
      <section aria-labelledby="bk-h"><h2 id="bk-h">${t('bill.by_kind')}</h2><${ErrorBox} error=${kinds.error} />
        <${Table} columns=${kindCols} rows=${kinds.data ? kinds.data.rows : undefined} error=${kinds.error} rowKey=${(r) => r.key} caption=${t('bill.by_kind')} /></section>
    </div>
    <h2>${t('bill.charges_title')}</h2>
    <${ErrorBox} error=${charges.error} />
    ${all && all.length > SHOW ? html`<p class="hint">${t('bill.more', { n: SHOW, all: all.length })}</p>` : null}
    <${Table} columns=${chargeCols} rows=${shown} error=${charges.error} rowKey=${(c) => (c.open ? `open:${c.meter_seq}:${c.period_from}` : c.seq)} caption=${t('bill.charges_title')} />
  <//>`;
}
