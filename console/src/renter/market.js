// The market: per region, the GPU models with their prices and free GPUs,
// and each host's offer (as the CLI's `suanli market` lists them), with the
// CLI's filters. "Create" opens the create dialog on that model and host.
// "Will it fit?" asks POST /v1/estimate (the same answer as `suanli
// estimate`) and keeps the hosts whose free GPUs hold the model.
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtMoney, fmtNumber, fmtBytes, setDefaultCurrency } from '../lib/format.js';
import { Page, ErrorBox, Field, Table, Badge, Spinner, useLoad } from '../lib/components.js';
import { navigate } from '../lib/router.js';
import { CreateDialog } from './create.js';

addMessages({
  en: {
    'market.title': 'Market',
    'market.filters': 'Filters',
    'market.region': 'Region',
    'market.all_regions': 'All regions',
    'market.gpu_model': 'GPU model',
    'market.min_free': 'At least N free GPUs',
    'market.min_vram': 'Min. VRAM (GB)',
    'market.cuda': 'CUDA version or newer',
    'market.apply': 'Apply',
    'market.reset': 'Reset',
    'market.models': 'GPU models',
    'market.hosts': 'Hosts',
    'market.host': 'Host',
    'market.model': 'Model',
    'market.vram': 'VRAM',
    'market.price': 'Price / GPU / hour',
    'market.free': 'Free / total',
    'market.nhosts': 'Hosts',
    'market.cpu': 'CPU / GPU',
    'market.mem': 'Memory / GPU',
    'market.disk': 'Max data disk',
    'market.driver': 'Driver / CUDA',
    'market.create': 'Create',
    'market.create_on': 'Create on {host} with {model}',
    'market.simulated': 'simulated',
    'market.no_price': 'no price',
    'market.nogpu': 'No-GPU mode: {price} / hour',
    'market.disk_price': 'Data disk: {free} GiB free, then {price} / GiB / day',
    'market.no_hosts': 'No host offers GPUs that match. Widen the filters, or wait for hosts to come online.',
    'market.new': 'New instance',
    'market.fit': 'Will it fit?',
    'market.fit_model': 'Model size',
    'market.fit_precision': 'Precision',
    'market.fit_job': 'Job',
    'market.fit_inference': 'Inference',
    'market.fit_full': 'Full fine-tune (Adam)',
    'market.fit_lora': 'LoRA',
    'market.fit_check': 'Check',
    'market.fit_clear': 'Show all hosts',
    'market.fit_needs': '{model} {precision} {job} needs {total}: showing the hosts whose free GPUs hold it.',
    'market.fit_parts': 'Memory, part by part',
    'market.fit_part': 'Part',
    'market.fit_bytes': 'Memory',
    'market.fit_formula': 'Formula',
    'market.fit_gpus': 'GPUs needed',
    'market.fit_none': 'No host has the free GPUs for it now.',
  },
  zh: {
    'market.title': '算力市场',
    'market.filters': '筛选',
    'market.region': '地区',
    'market.all_regions': '全部地区',
    'market.gpu_model': 'GPU 型号',
    'market.min_free': '至少空闲 GPU 数',
    'market.min_vram': '最小显存（GB）',
    'market.cuda': 'CUDA 版本不低于',
    'market.apply': '应用',
    'market.reset': '重置',
    'market.models': 'GPU 型号',
    'market.hosts': '主机',
    'market.host': '主机',
    'market.model': '型号',
    'market.vram': '显存',
    'market.price': '每卡每小时',
    'market.free': '空闲 / 总数',
    'market.nhosts': '主机数',
    'market.cpu': '每卡 CPU',
    'market.mem': '每卡内存',
    'market.disk': '最大数据盘',
    'market.driver': '驱动 / CUDA',
    'market.create': '创建',
    'market.create_on': '在 {host} 上用 {model} 创建',
    'market.simulated': '模拟',
    'market.no_price': '未定价',
    'market.nogpu': '无卡模式：{price} / 小时',
    'market.disk_price': '数据盘：免费 {free} GiB，超出每 GiB 每天 {price}',
    'market.no_hosts': '没有符合条件的主机。请放宽筛选条件，或等待主机上线。',
    'market.new': '新建实例',
    'market.fit': '显存够不够？',
    'market.fit_model': '模型大小',
    'market.fit_precision': '精度',
    'market.fit_job': '任务',
    'market.fit_inference': '推理',
    'market.fit_full': '全参数微调（Adam）',
    'market.fit_lora': 'LoRA',
    'market.fit_check': '估算',
    'market.fit_clear': '显示全部主机',
    'market.fit_needs': '{model} {precision} {job} 需要 {total}：只显示空闲 GPU 放得下的主机。',
    'market.fit_parts': '显存构成',
    'market.fit_part': '部分',
    'market.fit_bytes': '显存',
    'market.fit_formula': '公式',
    'market.fit_gpus': '所需 GPU',
    'market.fit_none': '目前没有主机有足够的空闲 GPU。',
  },
});

const gb = (mib) => fmtNumber(Math.round(mib / 1024)) + ' GB';
const price = (p) => (p === null || p === undefined ? html`<span class="muted">${t('market.no_price')}</span>` : fmtMoney(p));

// The "Will it fit?" form and, once answered, the estimate's parts.
function FitForm({ fit, onFit }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const f = e.target;
    setBusy(true);
    setError(null);
    try {
      const model = f.fit_model.value.trim();
      const r = await api.post('/v1/estimate', { model, precision: f.fit_precision.value, job: f.fit_job.value });
      onFit({ ...r, asked: model });
    } catch (err) {
      setError(err);
      onFit(null);
    } finally {
      setBusy(false);
    }
  };
  const partCols = [
    { key: 'name', label: t('market.fit_part') },
    { key: 'bytes', label: t('market.fit_bytes'), class: 'num', render: (p) => fmtBytes(p.bytes) },
    { key: 'formula', label: t('market.fit_formula'), render: (p) => html`<span class="mono small">${p.formula}</span>` },
  ];
  return html`<form class="filters card fit" onSubmit=${submit} aria-label=${t('market.fit')}>
    <h2>${t('market.fit')}</h2>
    <${Field} label=${t('market.fit_model')}><input name="fit_model" type="text" required placeholder="7B" maxlength="32" /><//>
    <${Field} label=${t('market.fit_precision')}>
      <select name="fit_precision">${['bf16', 'fp16', 'fp32', 'int8', 'int4'].map((p) => html`<option value=${p}>${p}</option>`)}</select>
    <//>
    <${Field} label=${t('market.fit_job')}>
      <select name="fit_job">${['inference', 'full', 'lora'].map((j) => html`<option value=${j}>${t('market.fit_' + j)}</option>`)}</select>
    <//>
    <div class="actions">
      <button type="submit" class="primary" disabled=${busy}>${t('market.fit_check')}</button>
      ${fit ? html`<button type="button" onClick=${() => onFit(null)}>${t('market.fit_clear')}</button>` : null}
    </div>
    <${ErrorBox} error=${error} />
    ${fit
      ? html`<p class="fit-summary" role="status">${t('market.fit_needs', { model: fit.asked, precision: fit.precision, job: t('market.fit_' + fit.job), total: fmtBytes(fit.total_bytes) })}
            ${fit.offers.length ? null : html`<br /><strong>${t('market.fit_none')}</strong>`}</p>
          <details><summary>${t('market.fit_parts')}</summary>
            <p class="muted small">${fit.model.source}</p>
            <${Table} columns=${partCols} rows=${fit.parts} rowKey=${(p) => p.name} caption=${t('market.fit_parts')} />
          </details>`
      : null}
  </form>`;
}

export default function Market() {
  const [filters, setFilters] = useState({});
  const [create, setCreate] = useState(null);
  const [fit, setFit] = useState(null);
  // node and GPU model -> the GPUs the estimate needs there
  const need = fit ? new Map(fit.offers.map((o) => [o.node_id + ' ' + o.gpu_model_id, o.gpus_needed])) : null;
  const fitting = (hosts) => (need ? hosts.filter((h) => need.has(h.node_id + ' ' + h.gpu_model_id)) : hosts);
  const m = useLoad(async () => {
    const r = await api.get('/v1/market', filters);
    setDefaultCurrency(r.currency);
    return r;
  }, [JSON.stringify(filters)]);
  const regions = useLoad(() => api.get('/v1/regions'), []);

  const apply = (e) => {
    e.preventDefault();
    const f = e.target;
    setFilters({
      region: f.region.value,
      gpu_model: f.gpu_model.value.trim(),
      min_free: f.min_free.value,
      min_vram_gib: f.min_vram_gib.value,
      cuda: f.cuda.value.trim(),
    });
  };
  const reset = (e) => {
    e.target.form.reset();
    setFilters({});
  };

  const hostCols = [
    { key: 'hostname', label: t('market.host'), render: (h) => html`<span>${h.hostname}</span><br /><span class="muted mono">${h.node_id}</span>` },
    { key: 'gpu_model', label: t('market.model'), render: (h) => html`${h.gpu_model} ${h.simulated ? html`<${Badge} kind="info">${t('market.simulated')}<//>` : null}` },
    { key: 'free', label: t('market.free'), class: 'num', render: (h) => html`<strong>${h.gpus_free}</strong> / ${h.gpus_total}` },
    { key: 'vram', label: t('market.vram'), class: 'num', render: (h) => gb(h.vram_mib) },
    { key: 'cpu', label: t('market.cpu'), class: 'num', render: (h) => fmtNumber(h.cpu_cores_per_gpu, 1) },
    { key: 'mem', label: t('market.mem'), class: 'num', render: (h) => gb(h.memory_mib_per_gpu) },
    { key: 'disk', label: t('market.disk'), class: 'num', render: (h) => fmtNumber(h.data_disk_free_gib) + ' GiB' },
    { key: 'driver', label: t('market.driver'), render: (h) => `${h.driver_version || '—'} / ${h.cuda_version || '—'}` },
    { key: 'price', label: t('market.price'), class: 'num', render: (h) => price(h.price_per_hour_micros) },
    ...(need ? [{ key: 'need', label: t('market.fit_gpus'), class: 'num fit-need', render: (h) => need.get(h.node_id + ' ' + h.gpu_model_id) }] : []),
    {
      key: 'act',
      label: t('market.create'),
      render: (h) => html`<button type="button" class="small primary" disabled=${!h.gpus_free || h.price_per_hour_micros === null}
        aria-label=${t('market.create_on', { host: h.hostname, model: h.gpu_model })}
        onClick=${() => setCreate({ region: h.region, gpu_model: h.gpu_model, host: h.node_id })}>${t('market.create')}</button>`,
    },
  ];
  const modelCols = [
    { key: 'name', label: t('market.model'), render: (g) => html`${g.name} ${g.simulated_gpus ? html`<${Badge} kind="info">${t('market.simulated')}<//>` : null}` },
    { key: 'vram', label: t('market.vram'), class: 'num', render: (g) => gb(g.vram_mib) },
    { key: 'price', label: t('market.price'), class: 'num', render: (g) => price(g.price_per_hour_micros) },
    { key: 'free', label: t('market.free'), class: 'num', render: (g) => html`<strong>${g.gpus_free}</strong> / ${g.gpus_total}` },
    { key: 'hosts', label: t('market.nhosts'), class: 'num', render: (g) => g.hosts },
  ];

  return html`<${Page} title=${t('market.title')} actions=${html`<button type="button" class="primary" onClick=${() => setCreate({})}>${t('market.new')}</button>`}>
    <form class="filters card" onSubmit=${apply} aria-label=${t('market.filters')}>
      <${Field} label=${t('market.region')}>
        <select name="region">
          <option value="">${t('market.all_regions')}</option>
          ${(regions.data ? regions.data.items : []).map((r) => html`<option value=${r.id}>${r.name || r.id}</option>`)}
        </select>
      <//>
      <${Field} label=${t('market.gpu_model')}><input name="gpu_model" type="text" placeholder="RTX 4090" /><//>
      <${Field} label=${t('market.min_free')}><input name="min_free" type="number" min="0" step="1" /><//>
      <${Field} label=${t('market.min_vram')}><input name="min_vram_gib" type="number" min="0" step="1" /><//>
      <${Field} label=${t('market.cuda')}><input name="cuda" type="text" placeholder="12.2" /><//>
      <div class="actions">
        <button type="submit" class="primary">${t('market.apply')}</button>
        <button type="button" onClick=${reset}>${t('market.reset')}</button>
      </div>
    </form>
    <${FitForm} fit=${fit} onFit=${setFit} />
    <${ErrorBox} error=${m.error} />
    ${m.data === undefined && !m.error ? html`<${Spinner} />` : null}
    ${m.data
      ? m.data.items.map(
          (r) => html`<section class="region" aria-labelledby=${'r-' + r.region}>
            <h2 id=${'r-' + r.region}>${r.region_name || r.region} <span class="muted mono">${r.region}</span></h2>
            <p class="muted">
              ${t('market.nogpu', { price: r.nogpu_price_per_hour_micros === null ? '—' : fmtMoney(r.nogpu_price_per_hour_micros) })}
              ${r.data_disk ? html` · ${t('market.disk_price', { free: r.data_disk.free_gib, price: fmtMoney(r.data_disk.price_per_gib_day_micros) })}` : null}
            </p>
            <h3>${t('market.hosts')}</h3>
            <${Table} columns=${hostCols} rows=${fitting(r.hosts)} rowKey=${(h) => h.node_id + h.gpu_model_id} empty=${t('market.no_hosts')} caption=${t('market.hosts')} />
            <h3>${t('market.models')}</h3>
            <${Table} columns=${modelCols} rows=${r.gpu_models} caption=${t('market.models')} />
          </section>`,
        )
      : null}
    <${CreateDialog} open=${!!create} preset=${create || {}} onClose=${() => setCreate(null)}
      onCreated=${(inst) => {
        setCreate(null);
        navigate('/instances/' + inst.id);
      }} />
  <//>`;
}
