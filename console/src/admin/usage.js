// Usage and revenue, from documented routes only:
//   - usage now, from GET /v1/admin/nodes: GPUs held of total per region
//     and model, instances by state, and the pay-as-you-go GPU charges per
//     hour at the prices in effect (GET /v1/admin/gpu-models?region=R);
//   - revenue: the total charged to date (charges_total_micros of GET
//     /v1/admin/billing/check, which also says the ledger agrees), and a
//     chosen month's revenue and GPU-hours per day (GET /v1/admin/bills,
//     all renters' charges summed per UTC day), as a table and the renter
//     billing page's bar chart.
// Plus the billing and ledger checks and a billing pass on demand.
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';
import { fmtMoney, fmtNumber } from '../lib/format.js';
import { Page, ErrorBox, Spinner, Badge, Table, Field } from '../lib/components.js';
import { useLoad, useAction, LoadError } from './common.js';
import { DayChart } from '../renter/billing.js';

addMessages({
  en: {
    'admin.usage.title': 'Usage & revenue',
    'admin.usage.now': 'Usage now',
    'admin.usage.gpusInUse': 'GPUs in use',
    'admin.usage.gpusOf': '{used} of {total}',
    'admin.usage.hostsOnline': 'Hosts online',
    'admin.usage.perHour': 'Pay-as-you-go GPU charges per hour',
    'admin.usage.perDay': 'At this rate, per day',
    'admin.usage.rateHint': 'Estimated from the GPUs pay-as-you-go instances hold now and the prices in effect; no-GPU mode, disks and plans (charged when bought) are not in it.',
    'admin.usage.byModel': 'GPUs per region and model',
    'admin.usage.col.region': 'Region',
    'admin.usage.col.model': 'Model',
    'admin.usage.col.hosts': 'Hosts',
    'admin.usage.col.used': 'Used / total',
    'admin.usage.col.util': 'Utilisation',
    'admin.usage.col.simulated': 'Simulated',
    'admin.usage.col.price': 'Price / GPU-hour',
    'admin.usage.col.rate': 'Charges / hour',
    'admin.usage.unmatched': 'not in the catalog',
    'admin.usage.noPrice': 'not set',
    'admin.usage.instances': 'Instances by state',
    'admin.usage.col.state': 'State',
    'admin.usage.col.count': 'Instances',
    'admin.usage.col.payg': 'Pay-as-you-go',
    'admin.usage.col.plan': 'On a plan',
    'admin.usage.noInstances': 'No instance lives on any host.',
    'admin.usage.revenue': 'Revenue',
    'admin.usage.total': 'Charged to renters to date',
    'admin.usage.ledgerAgrees': 'the ledger agrees',
    'admin.usage.ledgerDiffers': 'the ledger says {amount}: run the checks below',
    'admin.usage.perDayTitle': 'Revenue per day',
    'admin.usage.month': 'Month',
    'admin.usage.perDayNote': 'All renters\' charges of the month per UTC day; a charge counts on the day its period starts. GPU-hours: the GPUs pay-as-you-go instances held, times the hours settled.',
    'admin.usage.col.day': 'Day (UTC)',
    'admin.usage.col.charged': 'Revenue',
    'admin.usage.col.gpuHours': 'GPU-hours',
    'admin.usage.col.charges': 'Charges',
    'admin.usage.monthTotal': 'Total for {month}',
    'admin.usage.noDays': 'No charges in this month.',
    'admin.usage.checks': 'Checks',
    'admin.usage.billingCheck': 'Billing invariants',
    'admin.usage.ledgerCheck': 'Ledger invariants',
    'admin.usage.ok': 'ok',
    'admin.usage.bad': 'problems found',
    'admin.usage.meters': '{n} meters checked',
    'admin.usage.accounts': '{accounts} accounts, {txns} transactions',
    'admin.usage.run': 'Run a billing pass now',
    'admin.usage.ran': 'Billing pass: {meters} meters billed in {settlements} renter transactions, {stopped} stopped, {warnings} warnings, {released} released, {renewed} plans renewed, {expired} plans ended ({ms} ms).',
    'admin.usage.models': 'GPUs per region and model',
    'admin.usage.states': 'Instances by state',
    'admin.usage.days': 'Revenue per day',
  },
  zh: {
    'admin.usage.title': '用量与收入',
    'admin.usage.now': '当前用量',
    'admin.usage.gpusInUse': '使用中的 GPU',
    'admin.usage.gpusOf': '{used} / {total}',
    'admin.usage.hostsOnline': '在线主机',
    'admin.usage.perHour': '按量 GPU 每小时收费',
    'admin.usage.perDay': '按此速率每天',
    'admin.usage.rateHint': '按当前按量计费实例占用的 GPU 与现行价格估算；不含无卡模式、磁盘及包期（购买时收费）。',
    'admin.usage.byModel': '各地区各型号 GPU',
    'admin.usage.col.region': '地区',
    'admin.usage.col.model': '型号',
    'admin.usage.col.hosts': '主机',
    'admin.usage.col.used': '已用 / 总数',
    'admin.usage.col.util': '利用率',
    'admin.usage.col.simulated': '模拟',
    'admin.usage.col.price': '每卡每小时价格',
    'admin.usage.col.rate': '每小时收费',
    'admin.usage.unmatched': '不在目录中',
    'admin.usage.noPrice': '未定价',
    'admin.usage.instances': '各状态实例数',
    'admin.usage.col.state': '状态',
    'admin.usage.col.count': '实例数',
    'admin.usage.col.payg': '按量计费',
    'admin.usage.col.plan': '包期',
    'admin.usage.noInstances': '所有主机上都没有实例。',
    'admin.usage.revenue': '收入',
    'admin.usage.total': '累计向租户收费',
    'admin.usage.ledgerAgrees': '与账本一致',
    'admin.usage.ledgerDiffers': '账本记录为 {amount}：请运行下方的检查',
    'admin.usage.perDayTitle': '每日收入',
    'admin.usage.month': '月份',
    'admin.usage.perDayNote': '当月所有租户的费用按 UTC 日汇总；费用计入其计费区间开始的那一天。GPU 小时：按量计费实例占用的 GPU 数乘以已结算的小时数。',
    'admin.usage.col.day': '日期（UTC）',
    'admin.usage.col.charged': '收入',
    'admin.usage.col.gpuHours': 'GPU 小时',
    'admin.usage.col.charges': '费用笔数',
    'admin.usage.monthTotal': '{month} 合计',
    'admin.usage.noDays': '本月没有费用。',
    'admin.usage.checks': '检查',
    'admin.usage.billingCheck': '计费不变量',
    'admin.usage.ledgerCheck': '账本不变量',
    'admin.usage.ok': '正常',
    'admin.usage.bad': '发现问题',
    'admin.usage.meters': '已检查 {n} 个计量',
    'admin.usage.accounts': '{accounts} 个账户，{txns} 笔交易',
    'admin.usage.run': '立即运行一次计费',
    'admin.usage.ran': '计费完成：{meters} 个计量，{settlements} 笔租户扣费，停止 {stopped} 个，警告 {warnings} 次，释放 {released} 个，续费 {renewed} 个包期，结束 {expired} 个包期（{ms} 毫秒）。',
    'admin.usage.models': '各地区各型号 GPU',
    'admin.usage.states': '各状态实例数',
    'admin.usage.days': '每日收入',
  },
});

// Rows per region and GPU model: hosts, GPUs total/used/simulated, the
// price in effect there and the pay-as-you-go charges per hour of the GPUs
// held. prices: Map region -> Map model name -> price micros or null.
export function usageRows(nodes, prices) {
  const rows = new Map();
  for (const n of nodes) {
    const plans = new Map(n.instances.map((i) => [i.id, i.plan]));
    for (const g of n.gpus) {
      const model = g.model || null;
      const k = n.region + '|' + (model || g.name);
      let r = rows.get(k);
      if (!r) {
        const p = prices.get(n.region);
        r = { key: k, region: n.region, model, name: model || g.name, hosts: new Set(), total: 0, used: 0, simulated: 0, payg: 0,
          price: model && p && p.has(model) ? p.get(model) : null };
        rows.set(k, r);
      }
      r.hosts.add(n.id);
      r.total++;
      if (g.simulated) r.simulated++;
      if (g.instance_id) {
        r.used++;
        if ((plans.get(g.instance_id) || 'payg') === 'payg') r.payg++;
      }
    }
  }
  return [...rows.values()]
    .map((r) => ({ ...r, hosts: r.hosts.size, perHour: r.price === null ? 0 : r.payg * r.price }))
    .sort((a, b) => (a.region + a.name < b.region + b.name ? -1 : 1));
}

export function instanceStates(nodes) {
  const by = new Map();
  for (const n of nodes) {
    for (const i of n.instances) {
      const s = by.get(i.state) || { key: i.state, state: i.state, count: 0, payg: 0, plan: 0 };
      s.count++;
      if (i.plan === 'payg') s.payg++;
      else s.plan++;
      by.set(i.state, s);
    }
  }
  return [...by.values()].sort((a, b) => b.count - a.count);
}

export function thisMonth(now = new Date()) {
  return now.toISOString().slice(0, 7);
}

// GPU-hours from GPU-seconds, to two decimals (a display figure, not money).
export function gpuHours(seconds) {
  return Math.round((seconds || 0) / 36) / 100;
}

// The month's rows of GET /v1/admin/bills?by=day, newest day first, with
// the GPU-hours, and the month's totals.
export function monthDays(bill) {
  const days = bill.rows
    .map((r) => ({ key: r.key, day: r.day, amount: r.amount_micros, charges: r.charges, gpuHours: gpuHours(r.gpu_seconds) }))
    .sort((a, b) => (a.day < b.day ? 1 : -1));
  const gpuSeconds = bill.rows.reduce((s, r) => s + (r.gpu_seconds || 0), 0);
  const charges = bill.rows.reduce((s, r) => s + r.charges, 0);
  return { days, total: bill.total_micros, charges, gpuHours: gpuHours(gpuSeconds) };
}

async function loadFleet() {
  const nodes = await api.all('/v1/admin/nodes');
  const regions = [...new Set(nodes.map((n) => n.region))];
  const lists = await Promise.all(regions.map((r) => api.get('/v1/admin/gpu-models', { region: r })));
  const prices = new Map(regions.map((r, i) => [r, new Map(lists[i].items.map((m) => [m.name, m.price_per_hour_micros]))]));
  return { nodes, prices };
}

async function loadChecks() {
  const [billing, ledger] = await Promise.all([api.get('/v1/admin/billing/check'), api.get('/v1/admin/ledger/check')]);
  return { billing, ledger, at: new Date().toISOString() };
}

function Stat({ label, value, hint }) {
  return html`<div class="card">
    <div class="muted">${label}</div>
    <div class="big">${value}</div>
    ${hint ? html`<div class="hint">${hint}</div>` : null}
  </div>`;
}

export default function Usage() {
  const fleet = useLoad(loadFleet, [], { poll: 30000 });
  // both checks read every meter, charge and ledger entry: every 10 minutes
  const checks = useLoad(loadChecks, [], { poll: 600000 });
  const [month, setMonth] = useState(thisMonth());
  const bill = useLoad(() => api.get('/v1/admin/bills', { month, by: 'day' }), [month], { poll: 600000 });
  const run = useAction();
  const [ran, setRan] = useState(null);

  const billingRun = () => run.run(async () => {
    setRan(await api.post('/v1/admin/billing/run', {}, { idempotent: false }));
    checks.reload(true);
    fleet.reload(true);
    bill.reload(true);
  });

  const f = fleet.data;
  const rows = f ? usageRows(f.nodes, f.prices) : null;
  const states = f ? instanceStates(f.nodes) : null;
  const used = rows ? rows.reduce((s, r) => s + r.used, 0) : 0;
  const total = rows ? rows.reduce((s, r) => s + r.total, 0) : 0;
  const perHour = rows ? rows.reduce((s, r) => s + r.perHour, 0) : 0;
  const online = f ? f.nodes.filter((n) => n.state === 'online').length : 0;
  const c = checks.data;
  const m = bill.data ? monthDays(bill.data) : null;

  const modelCols = [
    { key: 'region', label: t('admin.usage.col.region') },
    { key: 'model', label: t('admin.usage.col.model'), render: (r) => (r.model ? r.model : html`${r.name} <span class="muted">(${t('admin.usage.unmatched')})</span>`) },
    { key: 'hosts', label: t('admin.usage.col.hosts'), class: 'num', render: (r) => fmtNumber(r.hosts) },
    { key: 'used', label: t('admin.usage.col.used'), class: 'num', render: (r) => t('admin.usage.gpusOf', { used: fmtNumber(r.used), total: fmtNumber(r.total) }) },
    { key: 'util', label: t('admin.usage.col.util'), class: 'num', render: (r) => (r.total ? fmtNumber(Math.round((100 * r.used) / r.total)) + '%' : '—') },
    { key: 'simulated', label: t('admin.usage.col.simulated'), class: 'num', render: (r) => fmtNumber(r.simulated) },
    { key: 'price', label: t('admin.usage.col.price'), class: 'num', render: (r) => (r.price === null ? t('admin.usage.noPrice') : fmtMoney(r.price)) },
    { key: 'rate', label: t('admin.usage.col.rate'), class: 'num', render: (r) => fmtMoney(r.perHour) },
  ];
  const stateCols = [
    { key: 'state', label: t('admin.usage.col.state') },
    { key: 'count', label: t('admin.usage.col.count'), class: 'num', render: (s) => fmtNumber(s.count) },
    { key: 'payg', label: t('admin.usage.col.payg'), class: 'num', render: (s) => fmtNumber(s.payg) },
    { key: 'plan', label: t('admin.usage.col.plan'), class: 'num', render: (s) => fmtNumber(s.plan) },
  ];
  const dayCols = [
    { key: 'day', label: t('admin.usage.col.day') },
    { key: 'charged', label: t('admin.usage.col.charged'), class: 'num', render: (d) => html`<span data-day=${d.day} data-amount=${d.amount}>${fmtMoney(d.amount)}</span>` },
    { key: 'gpuHours', label: t('admin.usage.col.gpuHours'), class: 'num', render: (d) => fmtNumber(d.gpuHours) },
    { key: 'charges', label: t('admin.usage.col.charges'), class: 'num', render: (d) => fmtNumber(d.charges) },
  ];
  const okBadge = (ok) => html`<${Badge} kind=${ok ? 'ok' : 'bad'}>${t(ok ? 'admin.usage.ok' : 'admin.usage.bad')}</${Badge}>`;

  return html`<${Page} title=${t('admin.usage.title')}>
    <${LoadError} error=${fleet.error || checks.error} />
    <h2>${t('admin.usage.now')}</h2>
    ${!f && fleet.loading ? html`<${Spinner} />` : null}
    ${f
      ? html`<div class="grid" data-testid="usage-now">
          <${Stat} label=${t('admin.usage.gpusInUse')} value=${t('admin.usage.gpusOf', { used: fmtNumber(used), total: fmtNumber(total) })} />
          <${Stat} label=${t('admin.usage.hostsOnline')} value=${t('admin.usage.gpusOf', { used: fmtNumber(online), total: fmtNumber(f.nodes.length) })} />
          <${Stat} label=${t('admin.usage.perHour')} value=${fmtMoney(perHour)} hint=${t('admin.usage.rateHint')} />
          <${Stat} label=${t('admin.usage.perDay')} value=${fmtMoney(perHour * 24)} />
        </div>
        <h3>${t('admin.usage.byModel')}</h3>
        <${Table} columns=${modelCols} rows=${rows} rowKey=${(r) => r.key} caption=${t('admin.usage.models')} />
        <h3>${t('admin.usage.instances')}</h3>
        <${Table} columns=${stateCols} rows=${states} rowKey=${(s) => s.key} empty=${t('admin.usage.noInstances')} caption=${t('admin.usage.states')} />`
      : null}
    <h2>${t('admin.usage.revenue')}</h2>
    ${c
      ? html`<div class="grid">
          <${Stat} label=${t('admin.usage.total')} value=${html`<span data-field="charged-total">${fmtMoney(c.billing.charges_total_micros)}</span>`}
            hint=${c.billing.ledger_charges_micros === c.billing.charges_total_micros
              ? t('admin.usage.ledgerAgrees')
              : t('admin.usage.ledgerDiffers', { amount: fmtMoney(c.billing.ledger_charges_micros) })} />
        </div>`
      : checks.loading ? html`<${Spinner} />` : null}
    <h3>${t('admin.usage.perDayTitle')}</h3>
    <div class="actions">
      <${Field} label=${t('admin.usage.month')}>
        <input type="month" name="month" value=${month} max=${thisMonth()} onChange=${(e) => e.target.value && setMonth(e.target.value)} />
      </${Field}>
    </div>
    <p class="hint">${t('admin.usage.perDayNote')}</p>
    <${LoadError} error=${bill.error} />
    ${m
      ? html`<div class="grid" data-testid="usage-month" data-month=${bill.data.month} data-total=${m.total}>
          <${Stat} label=${t('admin.usage.monthTotal', { month: bill.data.month })} value=${html`<span data-field="month-total">${fmtMoney(m.total)}</span>`} />
          <${Stat} label=${t('admin.usage.col.gpuHours')} value=${html`<span data-field="month-gpu-hours">${fmtNumber(m.gpuHours)}</span>`} />
          <${Stat} label=${t('admin.usage.col.charges')} value=${fmtNumber(m.charges)} />
        </div>
        <${DayChart} bill=${bill.data} />
        <${Table} columns=${dayCols} rows=${m.days} rowKey=${(d) => d.key} empty=${t('admin.usage.noDays')} caption=${t('admin.usage.days')} />`
      : bill.loading ? html`<${Spinner} />` : null}
    <h2>${t('admin.usage.checks')}</h2>
    ${c
      ? html`<dl class="kv">
          <dt>${t('admin.usage.billingCheck')}</dt><dd>${okBadge(c.billing.ok)} ${t('admin.usage.meters', { n: fmtNumber(c.billing.meters) })}</dd>
          <dt>${t('admin.usage.ledgerCheck')}</dt><dd>${okBadge(c.ledger.ok)} ${t('admin.usage.accounts', { accounts: fmtNumber(c.ledger.accounts), txns: fmtNumber(c.ledger.transactions) })}</dd>
        </dl>`
      : null}
    <div class="actions">
      <button type="button" onClick=${billingRun} disabled=${run.busy}>${t('admin.usage.run')}</button>
    </div>
    <${ErrorBox} error=${run.error} />
    ${ran
      ? html`<p class="notice" role="status">${t('admin.usage.ran', {
          settlements: fmtNumber(ran.settlements), meters: fmtNumber(ran.meters), stopped: fmtNumber(ran.stopped), warnings: fmtNumber(ran.warnings),
          released: fmtNumber(ran.released), renewed: fmtNumber(ran.renewed), expired: fmtNumber(ran.expired), ms: fmtNumber(Math.round(ran.elapsed_us / 1000)),
        })}</p>`
      : null}
  </${Page}>`;
}
