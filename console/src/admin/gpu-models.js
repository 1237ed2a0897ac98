// GPU models and prices: the catalog with each model's price per GPU-hour
// in effect (by default or in a region), a new model, a new price for one
// (PATCH, from now on; instances keep the rates they snapshotted), and the
// prices that are not a GPU's: no-GPU mode per hour, data disk and file
// storage per GiB-day over their free size (POST /v1/admin/prices). The
// history of every price is the price history page.
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';
import { fmtMoney, fmtNumber, fmtBytes, currency } from '../lib/format.js';
import { Link } from '../lib/router.js';
import { Page, ErrorBox, Dialog, Field, Spinner, Badge, Table } from '../lib/components.js';
import { useLoad, useAction, LoadError, parseAmount, microsToText } from './common.js';

addMessages({
  en: {
    'admin.gpu.title': 'GPU models & prices',
    'admin.gpu.pricesIn': 'Prices in',
    'admin.gpu.defaultPrices': 'default (every region without its own)',
    'admin.gpu.col.name': 'Model',
    'admin.gpu.col.vram': 'VRAM',
    'admin.gpu.col.cpu': 'CPU cores / GPU',
    'admin.gpu.col.mem': 'Memory / GPU',
    'admin.gpu.col.price': 'Price / GPU-hour',
    'admin.gpu.noPrice': 'not set',
    'admin.gpu.sample': 'sample',
    'admin.gpu.sampleHint': 'From the sample catalog a fresh install starts with: replace it.',
    'admin.gpu.setPrice': 'Set price',
    'admin.gpu.setPriceLabel': 'Set price: {name}',
    'admin.gpu.priceTitle': 'Price of {name}',
    'admin.gpu.priceNow': 'In effect now: {price}',
    'admin.gpu.newPrice': 'New price per GPU-hour ({currency})',
    'admin.gpu.priceHint': 'From now on. Running instances keep the rate they started with.',
    'admin.gpu.where': 'Where',
    'admin.gpu.whereDefault': 'Default price',
    'admin.gpu.save': 'Save price',
    'admin.gpu.saved': '{name}: {price} per GPU-hour from now on ({where}).',
    'admin.gpu.empty': 'No GPU model in the catalog yet.',
    'admin.gpu.add': 'Add a GPU model',
    'admin.gpu.name': 'Name',
    'admin.gpu.nameHint': 'As in the driver\'s name, such as RTX 4090: a host\'s GPU is this model when its name contains it.',
    'admin.gpu.vramMib': 'VRAM (MiB)',
    'admin.gpu.cpuPerGpu': 'CPU cores per GPU',
    'admin.gpu.memPerGpu': 'Memory per GPU (MiB)',
    'admin.gpu.addSubmit': 'Add model',
    'admin.gpu.added': '{name} added.',
    'admin.gpu.intBad': 'Enter whole numbers for VRAM, CPU cores and memory.',
    'admin.gpu.other': 'Other prices',
    'admin.gpu.otherIntro': 'No-GPU mode per hour; data disk and file storage per GiB-day over the free size. Current prices per region as the market shows them:',
    'admin.gpu.col.region': 'Region',
    'admin.gpu.col.nogpu': 'No-GPU mode / hour',
    'admin.gpu.col.disk': 'Data disk / GiB-day',
    'admin.gpu.col.files': 'File storage / GiB-day',
    'admin.gpu.freeGib': '{price} over {free} GiB',
    'admin.gpu.setOther': 'Set a price',
    'admin.gpu.item': 'Item',
    'admin.gpu.item.nogpu': 'No-GPU mode (per hour)',
    'admin.gpu.item.data_disk': 'Data disk (per GiB-day)',
    'admin.gpu.item.file_storage': 'File storage (per GiB-day)',
    'admin.gpu.item.image_storage': 'Saved images (per GiB-day, every region)',
    'admin.gpu.amount': 'Price ({currency})',
    'admin.gpu.free': 'Free GiB (not billed)',
    'admin.gpu.freeHint': 'Empty: 0.',
    'admin.gpu.otherSaved': '{item}: {price} from now on ({where}).',
    'admin.gpu.history': 'Every earlier price is in the price history.',
    'admin.gpu.list': 'GPU models',
    'admin.gpu.otherList': 'Other prices per region',
  },
  zh: {
    'admin.gpu.title': 'GPU 型号与价格',
    'admin.gpu.pricesIn': '价格范围',
    'admin.gpu.defaultPrices': '默认（未单独定价的地区）',
    'admin.gpu.col.name': '型号',
    'admin.gpu.col.vram': '显存',
    'admin.gpu.col.cpu': '每卡 CPU 核数',
    'admin.gpu.col.mem': '每卡内存',
    'admin.gpu.col.price': '每卡每小时价格',
    'admin.gpu.noPrice': '未定价',
    'admin.gpu.sample': '示例',
    'admin.gpu.sampleHint': '来自新安装自带的示例目录：请替换。',
    'admin.gpu.setPrice': '调价',
    'admin.gpu.setPriceLabel': '调价：{name}',
    'admin.gpu.priceTitle': '{name} 的价格',
    'admin.gpu.priceNow': '当前价格：{price}',
    'admin.gpu.newPrice': '新的每卡每小时价格（{currency}）',
    'admin.gpu.priceHint': '从现在起生效。运行中的实例保持开机时的费率。',
    'admin.gpu.where': '适用范围',
    'admin.gpu.whereDefault': '默认价格',
    'admin.gpu.save': '保存价格',
    'admin.gpu.saved': '{name}：从现在起每卡每小时 {price}（{where}）。',
    'admin.gpu.empty': '目录中还没有 GPU 型号。',
    'admin.gpu.add': '添加 GPU 型号',
    'admin.gpu.name': '名称',
    'admin.gpu.nameHint': '与驱动报告的名称一致，例如 RTX 4090：主机 GPU 名称包含它即属于该型号。',
    'admin.gpu.vramMib': '显存（MiB）',
    'admin.gpu.cpuPerGpu': '每卡 CPU 核数',
    'admin.gpu.memPerGpu': '每卡内存（MiB）',
    'admin.gpu.addSubmit': '添加型号',
    'admin.gpu.added': '已添加 {name}。',
    'admin.gpu.intBad': '显存、CPU 核数和内存请填写整数。',
    'admin.gpu.other': '其他价格',
    'admin.gpu.otherIntro': '无卡模式按小时计费；数据盘和文件存储按超出免费容量的 GiB·天计费。各地区当前价格（与市场一致）：',
    'admin.gpu.col.region': '地区',
    'admin.gpu.col.nogpu': '无卡模式 / 小时',
    'admin.gpu.col.disk': '数据盘 / GiB·天',
    'admin.gpu.col.files': '文件存储 / GiB·天',
    'admin.gpu.freeGib': '超出 {free} GiB 部分 {price}',
    'admin.gpu.setOther': '设置价格',
    'admin.gpu.item': '项目',
    'admin.gpu.item.nogpu': '无卡模式（每小时）',
    'admin.gpu.item.data_disk': '数据盘（每 GiB·天）',
    'admin.gpu.item.file_storage': '文件存储（每 GiB·天）',
    'admin.gpu.item.image_storage': '保存的镜像（每 GiB·天，所有地区）',
    'admin.gpu.amount': '价格（{currency}）',
    'admin.gpu.free': '免费容量（GiB，不计费）',
    'admin.gpu.freeHint': '留空：0。',
    'admin.gpu.otherSaved': '{item}：从现在起 {price}（{where}）。',
    'admin.gpu.history': '历史价格见价格历史页面。',
    'admin.gpu.list': 'GPU 型号',
    'admin.gpu.otherList': '各地区其他价格',
  },
});

function RegionSelect({ regions, value, onChange, name, label, defaultLabel }) {
  return html`<${Field} label=${label}>
    <select name=${name} value=${value} onChange=${(e) => onChange(e.target.value)}>
      <option value="">${defaultLabel}</option>
      ${regions.map((r) => html`<option key=${r.id} value=${r.id}>${r.id} · ${r.name}</option>`)}
    </select>
  </${Field}>`;
}

function PriceDialog({ model, regions, region, onClose, onDone }) {
  const [amount, setAmount] = useState(microsToText(model.price_per_hour_micros));
  const [where, setWhere] = useState(region);
  const { busy, error, setError, run } = useAction();
  const submit = (e) => {
    e.preventDefault();
    let micros;
    try {
      micros = parseAmount(amount, { allowZero: true, max: 1e12 });
    } catch (err) {
      return setError(err);
    }
    const body = { price_per_hour_micros: micros };
    if (where) body.region = where;
    return run(async () => {
      const m = await api.patch(`/v1/admin/gpu-models/${model.id}`, body);
      onDone(t('admin.gpu.saved', { name: m.name, price: fmtMoney(m.price_per_hour_micros), where: where || t('admin.gpu.whereDefault') }));
    });
  };
  return html`<${Dialog} open=${true} title=${t('admin.gpu.priceTitle', { name: model.name })} onClose=${onClose}>
    <form onSubmit=${submit}>
      <p>${t('admin.gpu.priceNow', { price: model.price_per_hour_micros === null ? t('admin.gpu.noPrice') : fmtMoney(model.price_per_hour_micros) })}</p>
      <${RegionSelect} regions=${regions} value=${where} onChange=${setWhere} name="region" label=${t('admin.gpu.where')} defaultLabel=${t('admin.gpu.whereDefault')} />
      <${Field} label=${t('admin.gpu.newPrice', { currency: currency() })} hint=${t('admin.gpu.priceHint')}>
        <input type="text" inputmode="decimal" name="price" required autocomplete="off" value=${amount} onInput=${(e) => setAmount(e.target.value)} />
      </${Field}>
      <${ErrorBox} error=${error} />
      <div class="buttons">
        <button type="button" onClick=${onClose}>${t('admin.common.cancel')}</button>
        <button type="submit" class="primary" disabled=${busy}>${t('admin.gpu.save')}</button>
      </div>
    </form>
  </${Dialog}>`;
}

function AddModel({ onDone }) {
  const [f, setF] = useState({ name: '', vram: '', cpu: '', mem: '', price: '' });
  const { busy, error, setError, run } = useAction();
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const submit = (e) => {
    e.preventDefault();
    const ints = [f.vram, f.cpu, f.mem].map((x) => (/^\d+$/.test(String(x).trim()) ? Number(x) : null));
    if (ints.includes(null)) return setError(new Error(t('admin.gpu.intBad')));
    let price;
    try {
      price = parseAmount(f.price, { allowZero: true, max: 1e12 });
    } catch (err) {
      return setError(err);
    }
    return run(async () => {
      const m = await api.post('/v1/admin/gpu-models', {
        name: f.name.trim(), vram_mib: ints[0], cpu_cores_per_gpu: ints[1], memory_mib_per_gpu: ints[2], price_per_hour_micros: price,
      });
      setF({ name: '', vram: '', cpu: '', mem: '', price: '' });
      onDone(t('admin.gpu.added', { name: m.name }));
    });
  };
  return html`<details class="card">
    <summary>${t('admin.gpu.add')}</summary>
    <form class="narrow" onSubmit=${submit}>
      <${Field} label=${t('admin.gpu.name')} hint=${t('admin.gpu.nameHint')}>
        <input type="text" name="name" required maxlength="64" value=${f.name} onInput=${set('name')} />
      </${Field}>
      <${Field} label=${t('admin.gpu.vramMib')}><input type="number" name="vram_mib" required min="1" step="1" value=${f.vram} onInput=${set('vram')} /></${Field}>
      <${Field} label=${t('admin.gpu.cpuPerGpu')}><input type="number" name="cpu_cores_per_gpu" required min="1" max="1024" step="1" value=${f.cpu} onInput=${set('cpu')} /></${Field}>
      <${Field} label=${t('admin.gpu.memPerGpu')}><input type="number" name="memory_mib_per_gpu" required min="1" step="1" value=${f.mem} onInput=${set('mem')} /></${Field}>
      <${Field} label=${t('admin.gpu.newPrice', { currency: currency() })}>
        <input type="text" inputmode="decimal" name="price" required autocomplete="off" value=${f.price} onInput=${set('price')} />
      </${Field}>
      <${ErrorBox} error=${error} />
      <div class="buttons"><button type="submit" class="primary" disabled=${busy}>${t('admin.gpu.addSubmit')}</button></div>
    </form>
  </details>`;
}

function OtherPrices({ regions, onDone, market }) {
  const [item, setItem] = useState('nogpu');
  const [where, setWhere] = useState('');
  const [amount, setAmount] = useState('');
  const [free, setFree] = useState('');
  const { busy, error, setError, run } = useAction();
  const submit = (e) => {
    e.preventDefault();
    let micros;
    try {
      micros = parseAmount(amount, { allowZero: true, max: 1e12 });
    } catch (err) {
      return setError(err);
    }
    const body = { item, amount_micros: micros };
    if (where) body.region = where;
    if (item !== 'nogpu' && free.trim()) {
      if (!/^\d+$/.test(free.trim())) return setError(new Error(t('admin.gpu.intBad')));
      body.free_gib = Number(free.trim());
    }
    return run(async () => {
      const p = await api.post('/v1/admin/prices', body);
      onDone(t('admin.gpu.otherSaved', { item: t('admin.gpu.item.' + p.item), price: fmtMoney(p.amount_micros), where: p.region || t('admin.gpu.whereDefault') }));
    });
  };
  const storage = (s) => (s ? t('admin.gpu.freeGib', { price: fmtMoney(s.price_per_gib_day_micros), free: fmtNumber(s.free_gib) }) : t('admin.gpu.noPrice'));
  const cols = [
    { key: 'region', label: t('admin.gpu.col.region'), render: (r) => html`${r.region} · ${r.region_name}` },
    { key: 'nogpu', label: t('admin.gpu.col.nogpu'), render: (r) => (r.nogpu_price_per_hour_micros === null ? t('admin.gpu.noPrice') : fmtMoney(r.nogpu_price_per_hour_micros)) },
    { key: 'disk', label: t('admin.gpu.col.disk'), render: (r) => storage(r.data_disk) },
    { key: 'files', label: t('admin.gpu.col.files'), render: (r) => storage(r.file_storage) },
  ];
  return html`<section aria-labelledby="other-prices-h">
    <h2 id="other-prices-h">${t('admin.gpu.other')}</h2>
    <p>${t('admin.gpu.otherIntro')}</p>
    ${market ? html`<${Table} columns=${cols} rows=${market.items} rowKey=${(r) => r.region} caption=${t('admin.gpu.otherList')} />` : null}
    <details class="card">
      <summary>${t('admin.gpu.setOther')}</summary>
      <form class="narrow" onSubmit=${submit}>
        <${Field} label=${t('admin.gpu.item')}>
          <select name="item" value=${item} onChange=${(e) => setItem(e.target.value)}>
            ${['nogpu', 'data_disk', 'file_storage', 'image_storage'].map((i) => html`<option key=${i} value=${i}>${t('admin.gpu.item.' + i)}</option>`)}
          </select>
        </${Field}>
        <${RegionSelect} regions=${regions} value=${where} onChange=${setWhere} name="region" label=${t('admin.gpu.where')} defaultLabel=${t('admin.gpu.whereDefault')} />
        <${Field} label=${t('admin.gpu.amount', { currency: currency() })}>
          <input type="text" inputmode="decimal" name="amount" required autocomplete="off" value=${amount} onInput=${(e) => setAmount(e.target.value)} />
        </${Field}>
        ${item !== 'nogpu'
          ? html`<${Field} label=${t('admin.gpu.free')} hint=${t('admin.gpu.freeHint')}>
              <input type="number" name="free_gib" min="0" step="1" value=${free} onInput=${(e) => setFree(e.target.value)} />
            </${Field}>`
          : null}
        <${ErrorBox} error=${error} />
        <div class="buttons"><button type="submit" class="primary" disabled=${busy}>${t('admin.gpu.save')}</button></div>
      </form>
    </details>
  </section>`;
}

export default function GpuModels() {
  const [region, setRegion] = useState('');
  const models = useLoad(() => api.get('/v1/admin/gpu-models', region ? { region } : undefined).then((r) => r.items), [region]);
  const regions = useLoad(() => api.get('/v1/admin/regions').then((r) => r.items), []);
  const market = useLoad(() => api.get('/v1/market'), []);
  const [pricing, setPricing] = useState(null);
  const [notice, setNotice] = useState(null);
  const done = (msg) => {
    setPricing(null);
    setNotice(msg);
    models.reload(true);
    market.reload(true);
  };
  const cols = [
    {
      key: 'name',
      label: t('admin.gpu.col.name'),
      render: (m) => html`<span data-model=${m.id}><strong>${m.name}</strong></span>
        ${m.sample ? html` <span title=${t('admin.gpu.sampleHint')}><${Badge} kind="muted">${t('admin.gpu.sample')}</${Badge}></span>` : null}`,
    },
    { key: 'vram', label: t('admin.gpu.col.vram'), class: 'num', render: (m) => fmtBytes(m.vram_mib * 1048576) },
    { key: 'cpu', label: t('admin.gpu.col.cpu'), class: 'num', render: (m) => fmtNumber(m.cpu_cores_per_gpu) },
    { key: 'mem', label: t('admin.gpu.col.mem'), class: 'num', render: (m) => fmtBytes(m.memory_mib_per_gpu * 1048576) },
    {
      key: 'price',
      label: t('admin.gpu.col.price'),
      class: 'num',
      render: (m) => html`<span data-field="price">${m.price_per_hour_micros === null ? t('admin.gpu.noPrice') : fmtMoney(m.price_per_hour_micros)}</span>`,
    },
    {
      key: 'actions',
      label: t('admin.common.actions'),
      render: (m) => html`<button type="button" class="small" data-action="price" aria-label=${t('admin.gpu.setPriceLabel', { name: m.name })}
        onClick=${() => setPricing(m)}>${t('admin.gpu.setPrice')}</button>`,
    },
  ];
  const regionList = regions.data || [];
  return html`<${Page} title=${t('admin.gpu.title')}>
    <div class="filters">
      <${RegionSelect} regions=${regionList} value=${region} onChange=${setRegion} name="prices_in"
        label=${t('admin.gpu.pricesIn')} defaultLabel=${t('admin.gpu.defaultPrices')} />
    </div>
    <${LoadError} error=${models.error || regions.error} />
    ${notice ? html`<p class="notice" role="status">${notice}</p>` : null}
    ${models.loading && !models.data ? html`<${Spinner} />` : null}
    ${models.data ? html`<${Table} columns=${cols} rows=${models.data} empty=${t('admin.gpu.empty')} caption=${t('admin.gpu.list')} />` : null}
    <p class="muted"><${Link} href="/admin/prices">${t('admin.gpu.history')}</${Link}></p>
    <${AddModel} onDone=${done} />
    <${ErrorBox} error=${market.error} />
    <${OtherPrices} regions=${regionList} market=${market.data} onDone=${done} />
    ${pricing ? html`<${PriceDialog} model=${pricing} regions=${regionList} region=${region} onClose=${() => setPricing(null)} onDone=${done} />` : null}
  </${Page}>`;
}
