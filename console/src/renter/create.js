// The create dialog: GPU model and count, image, data disk, plan; the price
// per hour and how long the balance covers it are shown before confirming.
import { html, useState, useEffect, useMemo } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtMoney, fmtDuration, fmtNumber, setDefaultCurrency } from '../lib/format.js';
import { Dialog, ErrorBox, Field, Spinner } from '../lib/components.js';

addMessages({
  en: {
    'create.title': 'Create an instance',
    'create.region': 'Region',
    'create.any_region': 'Any region',
    'create.gpu_model': 'GPU model',
    'create.gpus': 'GPUs',
    'create.free': '{free} of {total} free',
    'create.image': 'Image',
    'create.no_images': 'No image is ready yet: an operator must build one first.',
    'create.data_disk': 'Data disk (GiB)',
    'create.disk_free': '{free} GiB free of charge, then {price} per GiB a day.',
    'create.plan': 'Billing',
    'create.plan.payg': 'Pay as you go (per second)',
    'create.plan.day': 'Daily plan (prepaid)',
    'create.plan.week': 'Weekly plan (prepaid)',
    'create.plan.month': 'Monthly plan (prepaid, 30 days)',
    'create.auto_renew': 'Renew the plan at its end while the balance allows',
    'create.name': 'Name (optional)',
    'create.host': 'Host',
    'create.any_host': 'Any host with room',
    'create.price': 'Price',
    'create.per_hour': '{price} / hour',
    'create.disk_per_day': 'plus {price} / day for the data disk',
    'create.balance': 'Your balance {balance} covers about {time} of this.',
    'create.balance_short': 'Your balance {balance} does not cover one hour ({need}): top up first.',
    'create.plan_note': 'A prepaid plan is charged in full now, at the discount the operator sets; leaving it early refunds the unused part.',
    'create.no_price': 'This GPU model has no price in this region yet.',
    'create.submit': 'Create',
    'create.busy': 'Creating…',
    'create.cancel': 'Cancel',
  },
  zh: {
    'create.title': '创建实例',
    'create.region': '地区',
    'create.any_region': '任意地区',
    'create.gpu_model': 'GPU 型号',
    'create.gpus': 'GPU 数量',
    'create.free': '空闲 {free} / 共 {total}',
    'create.image': '镜像',
    'create.no_images': '还没有可用的镜像：需要运营人员先构建。',
    'create.data_disk': '数据盘（GiB）',
    'create.disk_free': '免费 {free} GiB，超出部分每 GiB 每天 {price}。',
    'create.plan': '计费方式',
    'create.plan.payg': '按量计费（按秒）',
    'create.plan.day': '包日（预付）',
    'create.plan.week': '包周（预付）',
    'create.plan.month': '包月（预付，30 天）',
    'create.auto_renew': '到期后在余额足够时自动续费',
    'create.name': '名称（可选）',
    'create.host': '主机',
    'create.any_host': '任意有空位的主机',
    'create.price': '价格',
    'create.per_hour': '{price} / 小时',
    'create.disk_per_day': '另加数据盘 {price} / 天',
    'create.balance': '当前余额 {balance}，约可使用 {time}。',
    'create.balance_short': '当前余额 {balance} 不足一小时（{need}），请先充值。',
    'create.plan_note': '包日/周/月在创建时一次性扣费，折扣由运营设定；提前退订按量返还未用部分。',
    'create.no_price': '该 GPU 型号在此地区尚未定价。',
    'create.submit': '创建',
    'create.busy': '创建中…',
    'create.cancel': '取消',
  },
});

export function CreateDialog({ open, onClose, onCreated, preset = {} }) {
  const [market, setMarket] = useState(null);
  const [images, setImages] = useState(null);
  const [balance, setBalance] = useState(null);
  const [loadErr, setLoadErr] = useState(null);
  const [f, setF] = useState({ region: '', gpu_model: '', gpus: 1, image: '', data_disk_gib: 50, plan: 'payg', auto_renew: false, name: '', host: '' });
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    if (!open) return;
    setError(null);
    setBusy(false);
    setF((x) => ({ ...x, region: preset.region || '', gpu_model: preset.gpu_model || x.gpu_model, host: preset.host || '', gpus: 1, name: '' }));
    Promise.all([api.get('/v1/market'), api.all('/v1/images'), api.get('/v1/balance')]).then(
      ([m, im, b]) => {
        setDefaultCurrency(m.currency);
        setMarket(m);
        const ready = im.filter((i) => i.state === 'ready');
        setImages(ready);
        setBalance(b);
        setF((x) => ({
          ...x,
          image: x.image && ready.some((i) => i.name === x.image) ? x.image : ready.length ? (ready.find((i) => i.name === 'debian-12') || ready[0]).name : '',
        }));
      },
      setLoadErr,
    );
  }, [open, preset.region, preset.gpu_model, preset.host]);

  const regions = market ? market.items : [];
  const inRegion = f.region ? regions.filter((r) => r.region === f.region) : regions;
  // the models on offer (by name), with the best price and the free GPUs
  const models = useMemo(() => {
    const m = new Map();
    for (const r of inRegion)
      for (const g of r.gpu_models) {
        const cur = m.get(g.name) || { name: g.name, vram_mib: g.vram_mib, price: null, free: 0, total: 0, disk: r.data_disk };
        if (g.price_per_hour_micros !== null && (cur.price === null || g.price_per_hour_micros < cur.price)) cur.price = g.price_per_hour_micros;
        cur.free += g.gpus_free;
        cur.total += g.gpus_total;
        m.set(g.name, cur);
      }
    return [...m.values()];
  }, [market, f.region]);
  useEffect(() => {
    if (models.length && !models.some((m) => m.name === f.gpu_model)) {
      const best = models.find((m) => m.free > 0) || models[0];
      setF((x) => ({ ...x, gpu_model: best.name }));
    }
  }, [models]);
  const model = models.find((m) => m.name === f.gpu_model);
  const hosts = inRegion.flatMap((r) => r.hosts).filter((h) => h.gpu_model === f.gpu_model);
  const host = f.host ? hosts.find((h) => h.node_id === f.host) : null;
  const price = host ? host.price_per_hour_micros : model ? model.price : null;
  const disk = inRegion.length ? inRegion[0].data_disk : null;
  const gpus = Math.max(1, Number(f.gpus) || 1);
  const perHour = price === null ? null : price * gpus;
  const diskPerDay = disk ? Math.max(0, (Number(f.data_disk_gib) || 0) - disk.free_gib) * disk.price_per_gib_day_micros : 0;
  const ratePerHour = perHour === null ? null : perHour + diskPerDay / 24;
  const covers = balance && ratePerHour ? Math.floor((balance.balance_micros / ratePerHour) * 3600) : null;

  const set = (k) => (e) => setF({ ...f, [k]: e.target.type === 'checkbox' ? e.target.checked : e.target.value });
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    const body = { gpu_model: f.gpu_model, gpus, image: f.image, data_disk_gib: Number(f.data_disk_gib) || 50, plan: f.plan };
    if (f.region) body.region = f.region;
    if (f.host) body.host = f.host;
    if (f.name.trim()) body.name = f.name.trim();
    if (f.plan !== 'payg') body.auto_renew = !!f.auto_renew;
    try {
      const inst = await api.post('/v1/instances', body);
      setBusy(false);
      onCreated(inst);
    } catch (err) {
      setError(err);
      setBusy(false);
    }
  };

  let content;
  if (loadErr) content = html`<${ErrorBox} error=${loadErr} />`;
  else if (!market || !images) content = html`<${Spinner} />`;
  else
    content = html`<form onSubmit=${submit} id="create-form">
      <${Field} label=${t('create.region')}>
        <select name="region" value=${f.region} onChange=${(e) => setF({ ...f, region: e.target.value, host: '' })}>
          <option value="">${t('create.any_region')}</option>
          ${regions.map((r) => html`<option value=${r.region}>${r.region_name || r.region}</option>`)}
        </select>
      <//>
      <${Field} label=${t('create.gpu_model')}>
        <select name="gpu_model" value=${f.gpu_model} required onChange=${(e) => setF({ ...f, gpu_model: e.target.value, host: '' })}>
          ${models.map(
            (m) => html`<option value=${m.name}>${m.name} · ${fmtNumber(Math.round(m.vram_mib / 1024))} GB · ${m.price === null ? '—' : fmtMoney(m.price)} · ${t('create.free', { free: m.free, total: m.total })}</option>`,
          )}
        </select>
      <//>
      ${hosts.length
        ? html`<${Field} label=${t('create.host')}>
            <select name="host" value=${f.host} onChange=${set('host')}>
              <option value="">${t('create.any_host')}</option>
              ${hosts.map((h) => html`<option value=${h.node_id}>${h.hostname} · ${t('create.free', { free: h.gpus_free, total: h.gpus_total })}</option>`)}
            </select>
          <//>`
        : null}
      <${Field} label=${t('create.gpus')}>
        <input type="number" name="gpus" min="1" max="64" step="1" value=${f.gpus} onInput=${set('gpus')} required />
      <//>
      <${Field} label=${t('create.image')}>
        ${images.length
          ? html`<select name="image" value=${f.image} onChange=${set('image')} required>
              ${images.map((i) => html`<option value=${i.name}>${i.name}${i.description ? ' — ' + i.description : ''}</option>`)}
            </select>`
          : html`<p class="warnbox">${t('create.no_images')}</p>`}
      <//>
      <${Field} label=${t('create.data_disk')} hint=${disk ? t('create.disk_free', { free: disk.free_gib, price: fmtMoney(disk.price_per_gib_day_micros) }) : null}>
        <input type="number" name="data_disk_gib" min="1" step="1" value=${f.data_disk_gib} onInput=${set('data_disk_gib')} required />
      <//>
      <${Field} label=${t('create.plan')}>
        <select name="plan" value=${f.plan} onChange=${set('plan')}>
          ${['payg', 'day', 'week', 'month'].map((p) => html`<option value=${p}>${t('create.plan.' + p)}</option>`)}
        </select>
      <//>
      ${f.plan !== 'payg'
        ? html`<label class="check"><input type="checkbox" name="auto_renew" checked=${f.auto_renew} onChange=${set('auto_renew')} /> ${t('create.auto_renew')}</label>
            <p class="hint">${t('create.plan_note')}</p>`
        : null}
      <${Field} label=${t('create.name')}>
        <input type="text" name="name" maxlength="64" autocomplete="off" value=${f.name} onInput=${set('name')} />
      <//>
      <div class="notice" id="create-price" aria-live="polite">
        ${perHour === null
          ? t('create.no_price')
          : html`<strong>${t('create.per_hour', { price: fmtMoney(perHour) })}</strong>
              ${diskPerDay ? html` ${t('create.disk_per_day', { price: fmtMoney(diskPerDay) })}` : null}
              <br />
              ${balance
                ? balance.balance_micros >= ratePerHour
                  ? t('create.balance', { balance: fmtMoney(balance.balance_micros), time: fmtDuration(covers) })
                  : t('create.balance_short', { balance: fmtMoney(balance.balance_micros), need: fmtMoney(Math.ceil(ratePerHour)) })
                : null}`}
      </div>
      <${ErrorBox} error=${error} />
      <div class="buttons">
        <button type="button" onClick=${onClose}>${t('create.cancel')}</button>
        <button type="submit" class="primary" disabled=${busy || !f.image || !f.gpu_model}>${busy ? t('create.busy') : t('create.submit')}</button>
      </div>
    </form>`;
  return html`<${Dialog} open=${open} title=${t('create.title')} onClose=${onClose} wide>${content}<//>`;
}
