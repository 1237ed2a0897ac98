// Hosts: every enrolled host with its state, GPUs used of total, last
// heartbeat and simulated flag; cordon, drain (optionally moving stopped
// instances away), uncordon and remove. GET /v1/admin/nodes, polled: the
// event stream carries only the caller's own instances.
import { html, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';
import { fmtDateTime, fmtNumber, fmtBytes } from '../lib/format.js';
import { Page, ErrorBox, Dialog, Field, Spinner, Badge, Table } from '../lib/components.js';
import { useLoad, useAction, LoadError, ago } from './common.js';

addMessages({
  en: {
    'admin.hosts.title': 'Hosts',
    'admin.hosts.summary': 'Hosts: {hosts}, online: {online} · GPUs in use: {used} of {total}',
    'admin.hosts.empty': 'No host has enrolled yet. Create a join token and start suanli-node on the host with it.',
    'admin.hosts.col.host': 'Host',
    'admin.hosts.col.state': 'State',
    'admin.hosts.col.gpus': 'GPUs used / total',
    'admin.hosts.col.heartbeat': 'Last heartbeat',
    'admin.hosts.col.instances': 'Instances',
    'admin.hosts.state.online': 'online',
    'admin.hosts.state.offline': 'offline',
    'admin.hosts.state.lost': 'lost',
    'admin.hosts.cordoned': 'cordoned',
    'admin.hosts.draining': 'draining',
    'admin.hosts.simulated': 'simulated',
    'admin.hosts.simulatedHint': 'Simulated GPUs: a test host without real GPUs',
    'admin.hosts.gpusUsed': '{used} / {total}',
    'admin.hosts.noGpus': 'no GPUs',
    'admin.hosts.unmatched': 'not in the catalog',
    'admin.hosts.cordon': 'Cordon',
    'admin.hosts.drain': 'Drain',
    'admin.hosts.drainAgain': 'Drain again',
    'admin.hosts.uncordon': 'Uncordon',
    'admin.hosts.remove': 'Remove',
    'admin.hosts.details': 'Details',
    'admin.hosts.actionsFor': 'Actions for {host}',
    'admin.hosts.reason': 'Reason (optional)',
    'admin.hosts.reasonHint': 'One line, shown to the renters of this host.',
    'admin.hosts.cordonTitle': 'Cordon {host}',
    'admin.hosts.cordonText': 'Nothing new is placed on this host; its instances run on. A stopped instance there starts only in no-GPU mode or on a plan.',
    'admin.hosts.drainTitle': 'Drain {host}',
    'admin.hosts.drainText': 'Cordons the host and stops its pay-as-you-go instances; each renter is told why. Instances on a plan run to its end. Again on a draining host: stops what started since, and with migrate tries again to move what did not move.',
    'admin.hosts.migrate': 'Also move stopped instances to other hosts (migrate)',
    'admin.hosts.migrateHint': 'Those the drain stops move once their host says they stopped; those that cannot move now are listed with the reason.',
    'admin.hosts.removeTitle': 'Remove {host}',
    'admin.hosts.removeText': 'Its node token stops working and its GPUs leave the market. A host that still holds instances cannot be removed: drain it first and wait for its renters to release them.',
    'admin.hosts.confirmRemove': 'Remove the host',
    'admin.hosts.drainResult': 'Drain of {host}',
    'admin.hosts.stopped': 'Stopped',
    'admin.hosts.runningOnPlan': 'Running on a plan (to its end)',
    'admin.hosts.migrating': 'Migrating',
    'admin.hosts.notMigrated': 'Not migrated',
    'admin.hosts.done': 'Done: {what}.',
    'admin.hosts.did.cordon': '{host} is cordoned',
    'admin.hosts.did.uncordon': '{host} takes placements again',
    'admin.hosts.did.remove': '{host} was removed',
    'admin.hosts.address': 'Address',
    'admin.hosts.region': 'Region',
    'admin.hosts.cpuMem': 'CPU / memory',
    'admin.hosts.cpuMemValue': '{cpu} cores / {mem}',
    'admin.hosts.disk': 'Instance disks',
    'admin.hosts.diskValue': '{promised} GiB promised of {capacity} GiB · {free} free',
    'admin.hosts.versions': 'Driver / CUDA / agent',
    'admin.hosts.cordonReason': 'Cordon reason',
    'admin.hosts.gpuList': 'GPUs of {host}',
    'admin.hosts.gpu.index': '#',
    'admin.hosts.gpu.name': 'Name',
    'admin.hosts.gpu.model': 'Model',
    'admin.hosts.gpu.vram': 'VRAM',
    'admin.hosts.gpu.instance': 'Held by',
    'admin.hosts.gpu.free': 'free',
    'admin.hosts.instList': 'Instances on {host}',
    'admin.hosts.inst.id': 'Instance',
    'admin.hosts.inst.state': 'State',
    'admin.hosts.inst.plan': 'Plan',
    'admin.hosts.inst.user': 'User',
    'admin.hosts.tableLabel': 'Hosts',
  },
  zh: {
    'admin.hosts.title': '主机',
    'admin.hosts.summary': '共 {hosts} 台主机，{online} 台在线 · GPU 已用 {used} / {total}',
    'admin.hosts.empty': '还没有主机加入。请创建加入令牌，并在主机上用它启动 suanli-node。',
    'admin.hosts.col.host': '主机',
    'admin.hosts.col.state': '状态',
    'admin.hosts.col.gpus': 'GPU 已用 / 总数',
    'admin.hosts.col.heartbeat': '最近心跳',
    'admin.hosts.col.instances': '实例',
    'admin.hosts.state.online': '在线',
    'admin.hosts.state.offline': '离线',
    'admin.hosts.state.lost': '失联',
    'admin.hosts.cordoned': '已封锁',
    'admin.hosts.draining': '排空中',
    'admin.hosts.simulated': '模拟',
    'admin.hosts.simulatedHint': '模拟 GPU：没有真实 GPU 的测试主机',
    'admin.hosts.gpusUsed': '{used} / {total}',
    'admin.hosts.noGpus': '无 GPU',
    'admin.hosts.unmatched': '不在目录中',
    'admin.hosts.cordon': '封锁',
    'admin.hosts.drain': '排空',
    'admin.hosts.drainAgain': '再次排空',
    'admin.hosts.uncordon': '解除封锁',
    'admin.hosts.remove': '移除',
    'admin.hosts.details': '详情',
    'admin.hosts.actionsFor': '{host} 的操作',
    'admin.hosts.reason': '原因（可选）',
    'admin.hosts.reasonHint': '一行文字，会展示给该主机上的租户。',
    'admin.hosts.cordonTitle': '封锁 {host}',
    'admin.hosts.cordonText': '不再向该主机放置新实例；已有实例继续运行。该主机上已停止的实例只能以无卡模式或在包月/包周期内启动。',
    'admin.hosts.drainTitle': '排空 {host}',
    'admin.hosts.drainText': '封锁该主机并停止其按量计费的实例，并通知每位租户原因。包期实例运行到期满为止。对排空中的主机再次排空：停止此后启动的实例；勾选迁移时重试尚未迁走的实例。',
    'admin.hosts.migrate': '同时把已停止的实例迁移到其他主机',
    'admin.hosts.migrateHint': '被排空停止的实例在主机确认停止后迁移；暂时无法迁移的实例会连同原因列出。',
    'admin.hosts.removeTitle': '移除 {host}',
    'admin.hosts.removeText': '其节点令牌将失效，GPU 退出市场。仍有实例的主机不能移除：请先排空，并等待租户释放实例。',
    'admin.hosts.confirmRemove': '移除主机',
    'admin.hosts.drainResult': '{host} 的排空结果',
    'admin.hosts.stopped': '已停止',
    'admin.hosts.runningOnPlan': '包期内继续运行（至期满）',
    'admin.hosts.migrating': '迁移中',
    'admin.hosts.notMigrated': '未迁移',
    'admin.hosts.done': '完成：{what}。',
    'admin.hosts.did.cordon': '{host} 已封锁',
    'admin.hosts.did.uncordon': '{host} 恢复接受放置',
    'admin.hosts.did.remove': '{host} 已移除',
    'admin.hosts.address': '地址',
    'admin.hosts.region': '地区',
    'admin.hosts.cpuMem': 'CPU / 内存',
    'admin.hosts.cpuMemValue': '{cpu} 核 / {mem}',
    'admin.hosts.disk': '实例磁盘',
    'admin.hosts.diskValue': '已承诺 {promised} GiB / 容量 {capacity} GiB · 空闲 {free}',
    'admin.hosts.versions': '驱动 / CUDA / 代理',
    'admin.hosts.cordonReason': '封锁原因',
    'admin.hosts.gpuList': '{host} 的 GPU',
    'admin.hosts.gpu.index': '#',
    'admin.hosts.gpu.name': '名称',
    'admin.hosts.gpu.model': '型号',
    'admin.hosts.gpu.vram': '显存',
    'admin.hosts.gpu.instance': '占用实例',
    'admin.hosts.gpu.free': '空闲',
    'admin.hosts.instList': '{host} 上的实例',
    'admin.hosts.inst.id': '实例',
    'admin.hosts.inst.state': '状态',
    'admin.hosts.inst.plan': '计费方式',
    'admin.hosts.inst.user': '用户',
    'admin.hosts.tableLabel': '主机',
  },
});

const STATE_KIND = { online: 'ok', offline: 'warn', lost: 'bad' };

// "2× RTX 4090" per model on the host.
export function gpuSummary(node) {
  const by = new Map();
  for (const g of node.gpus || []) {
    const k = g.model || g.name;
    by.set(k, (by.get(k) || 0) + 1);
  }
  return [...by].map(([k, n]) => `${n}× ${k}`).join(', ');
}

export function fleetTotals(nodes) {
  let online = 0;
  let used = 0;
  let total = 0;
  for (const n of nodes) {
    if (n.state === 'online') online++;
    total += n.gpus_total;
    used += n.gpus_total - n.gpus_free;
  }
  return { hosts: nodes.length, online, used, total };
}

function HostDetails({ node }) {
  const gpuCols = [
    { key: 'index', label: t('admin.hosts.gpu.index') },
    { key: 'name', label: t('admin.hosts.gpu.name'), render: (g) => html`${g.name}${g.simulated ? html` <${Badge} kind="info">${t('admin.hosts.simulated')}</${Badge}>` : null}` },
    { key: 'model', label: t('admin.hosts.gpu.model'), render: (g) => g.model || t('admin.hosts.unmatched') },
    { key: 'vram', label: t('admin.hosts.gpu.vram'), render: (g) => fmtBytes(g.vram_mib * 1048576) },
    { key: 'instance', label: t('admin.hosts.gpu.instance'), render: (g) => (g.instance_id ? html`<code>${g.instance_id}</code>` : t('admin.hosts.gpu.free')) },
  ];
  const instCols = [
    { key: 'id', label: t('admin.hosts.inst.id'), render: (i) => html`<code>${i.id}</code>` },
    { key: 'state', label: t('admin.hosts.inst.state') },
    { key: 'plan', label: t('admin.hosts.inst.plan') },
    { key: 'user', label: t('admin.hosts.inst.user'), render: (i) => html`<code>${i.user_id}</code>` },
  ];
  return html`<div data-testid="host-details">
    <dl class="kv">
      <dt>${t('admin.hosts.address')}</dt><dd>${node.address}</dd>
      <dt>${t('admin.hosts.region')}</dt><dd>${node.region}</dd>
      <dt>${t('admin.hosts.cpuMem')}</dt>
      <dd>${t('admin.hosts.cpuMemValue', { cpu: fmtNumber(node.cpu_cores), mem: fmtBytes(node.memory_mib * 1048576) })}</dd>
      <dt>${t('admin.hosts.disk')}</dt>
      <dd>${t('admin.hosts.diskValue', { promised: fmtNumber(node.disk.promised_gib), capacity: fmtNumber(node.disk.capacity_gib), free: fmtBytes(node.disk.free_bytes) })}</dd>
      <dt>${t('admin.hosts.versions')}</dt>
      <dd>${node.driver_version || '—'} / ${node.cuda_version || '—'} / ${node.agent_version || '—'}</dd>
      ${node.cordon_reason ? html`<dt>${t('admin.hosts.cordonReason')}</dt><dd>${node.cordon_reason}</dd>` : null}
    </dl>
    <h3>${t('admin.hosts.gpuList', { host: node.hostname })}</h3>
    <${Table} columns=${gpuCols} rows=${node.gpus} rowKey=${(g) => g.uuid} empty=${t('admin.hosts.noGpus')}
      caption=${t('admin.hosts.gpuList', { host: node.hostname })} />
    <h3>${t('admin.hosts.instList', { host: node.hostname })}</h3>
    <${Table} columns=${instCols} rows=${node.instances} empty=${t('admin.common.none')}
      caption=${t('admin.hosts.instList', { host: node.hostname })} />
  </div>`;
}

function IdList({ title, ids }) {
  if (!ids || !ids.length) return null;
  return html`<div>
    <h3>${title} (${ids.length})</h3>
    <ul>${ids.map((i) => (typeof i === 'string'
      ? html`<li key=${i}><code>${i}</code></li>`
      : html`<li key=${i.id}><code>${i.id}</code>: ${i.reason}</li>`))}</ul>
  </div>`;
}

function DrainResult({ result, onClose }) {
  const r = result.result;
  const nothing = !r.stopped.length && !r.running_on_plan.length && !r.migrating.length && !r.not_migrated.length;
  return html`<section class="card" aria-live="polite" data-testid="drain-result">
    <h2>${t('admin.hosts.drainResult', { host: result.host })}</h2>
    ${nothing ? html`<p>${t('admin.common.none')}</p>` : null}
    <${IdList} title=${t('admin.hosts.stopped')} ids=${r.stopped} />
    <${IdList} title=${t('admin.hosts.runningOnPlan')} ids=${r.running_on_plan} />
    <${IdList} title=${t('admin.hosts.migrating')} ids=${r.migrating} />
    <${IdList} title=${t('admin.hosts.notMigrated')} ids=${r.not_migrated} />
    <button type="button" onClick=${onClose}>${t('admin.common.close')}</button>
  </section>`;
}

// The dialog of one action on one host: cordon (reason), drain (reason,
// migrate) or remove (a confirmation).
function ActionDialog({ action, onClose, onDone }) {
  const { node, kind } = action;
  const [reason, setReason] = useState('');
  const [migrate, setMigrate] = useState(false);
  const { busy, error, run } = useAction();
  const host = node.hostname;
  const titles = { cordon: 'admin.hosts.cordonTitle', drain: 'admin.hosts.drainTitle', remove: 'admin.hosts.removeTitle' };
  const texts = { cordon: 'admin.hosts.cordonText', drain: 'admin.hosts.drainText', remove: 'admin.hosts.removeText' };

  const submit = (e) => {
    e.preventDefault();
    run(async () => {
      const body = {};
      if (reason.trim()) body.reason = reason.trim();
      if (kind === 'cordon') {
        await api.post(`/v1/admin/nodes/${node.id}/cordon`, body);
        onDone({ message: t('admin.hosts.did.cordon', { host }) });
      } else if (kind === 'drain') {
        if (migrate) body.migrate = true;
        const r = await api.post(`/v1/admin/nodes/${node.id}/drain`, body);
        onDone({ drain: { host, result: r } });
      } else {
        await api.del(`/v1/admin/nodes/${node.id}`);
        onDone({ message: t('admin.hosts.did.remove', { host }) });
      }
    });
  };
  return html`<${Dialog} open=${true} title=${t(titles[kind], { host })} onClose=${onClose}>
    <form onSubmit=${submit}>
      <p>${t(texts[kind])}</p>
      ${kind !== 'remove'
        ? html`<${Field} label=${t('admin.hosts.reason')} hint=${t('admin.hosts.reasonHint')}>
            <input type="text" name="reason" maxlength="200" value=${reason} onInput=${(e) => setReason(e.target.value)} />
          </${Field}>`
        : null}
      ${kind === 'drain'
        ? html`<label class="check"><input type="checkbox" name="migrate" checked=${migrate} onChange=${(e) => setMigrate(e.target.checked)} />
            <span>${t('admin.hosts.migrate')}</span></label>
          <p class="hint">${t('admin.hosts.migrateHint')}</p>`
        : null}
      <${ErrorBox} error=${error} />
      <div class="buttons">
        <button type="button" onClick=${onClose}>${t('admin.common.cancel')}</button>
        <button type="submit" class=${kind === 'cordon' ? 'primary' : 'danger'} disabled=${busy}>
          ${kind === 'remove' ? t('admin.hosts.confirmRemove') : t(kind === 'drain' ? 'admin.hosts.drain' : 'admin.hosts.cordon')}
        </button>
      </div>
    </form>
  </${Dialog}>`;
}

export default function Hosts() {
  const { data, error, loading, reload } = useLoad(() => api.all('/v1/admin/nodes'), [], { poll: 10000 });
  const [action, setAction] = useState(null);
  const [details, setDetails] = useState(null);
  const [notice, setNotice] = useState(null);
  const [drain, setDrain] = useState(null);
  const uncordon = useAction();

  const done = (r) => {
    setAction(null);
    if (r.drain) setDrain(r.drain);
    setNotice(r.message || null);
    reload(true);
  };
  const doUncordon = (node) => uncordon.run(async () => {
    await api.post(`/v1/admin/nodes/${node.id}/uncordon`);
    setNotice(t('admin.hosts.did.uncordon', { host: node.hostname }));
    reload(true);
  });

  const nodes = data || [];
  const columns = [
    {
      key: 'host',
      label: t('admin.hosts.col.host'),
      render: (n) => html`<div data-node=${n.id}><strong>${n.hostname}</strong>
        <div class="muted"><code>${n.id}</code> · ${n.region}</div></div>`,
    },
    {
      key: 'state',
      label: t('admin.hosts.col.state'),
      render: (n) => html`<span data-field="state" data-value=${n.state}><${Badge} kind=${STATE_KIND[n.state] || 'info'}>${t('admin.hosts.state.' + n.state)}</${Badge}></span>
        ${n.draining
          ? html` <span data-field="cordon" data-value="draining"><${Badge} kind="warn">${t('admin.hosts.draining')}</${Badge}></span>`
          : n.cordoned ? html` <span data-field="cordon" data-value="cordoned"><${Badge} kind="warn">${t('admin.hosts.cordoned')}</${Badge}></span>` : null}`,
    },
    {
      key: 'gpus',
      label: t('admin.hosts.col.gpus'),
      render: (n) => html`<span data-field="gpus">${n.gpus_total ? t('admin.hosts.gpusUsed', { used: n.gpus_total - n.gpus_free, total: n.gpus_total }) : t('admin.hosts.noGpus')}</span>
        ${n.simulated ? html` <span data-field="simulated" title=${t('admin.hosts.simulatedHint')}><${Badge} kind="info">${t('admin.hosts.simulated')}</${Badge}></span>` : null}
        <div class="muted">${gpuSummary(n)}</div>`,
    },
    {
      key: 'heartbeat',
      label: t('admin.hosts.col.heartbeat'),
      render: (n) => html`<time datetime=${n.last_heartbeat || ''} title=${fmtDateTime(n.last_heartbeat)}>${ago(n.last_heartbeat)}</time>`,
    },
    { key: 'instances', label: t('admin.hosts.col.instances'), class: 'num', render: (n) => fmtNumber(n.instances.length) },
    {
      key: 'actions',
      label: t('admin.common.actions'),
      render: (n) => html`<div class="row-actions" role="group" aria-label=${t('admin.hosts.actionsFor', { host: n.hostname })}>
        ${n.cordoned
          ? html`<button type="button" class="small" data-action="uncordon" disabled=${uncordon.busy} onClick=${() => doUncordon(n)}>${t('admin.hosts.uncordon')}</button>`
          : html`<button type="button" class="small" data-action="cordon" onClick=${() => setAction({ kind: 'cordon', node: n })}>${t('admin.hosts.cordon')}</button>`}
        <button type="button" class="small" data-action="drain" onClick=${() => setAction({ kind: 'drain', node: n })}>${t(n.draining ? 'admin.hosts.drainAgain' : 'admin.hosts.drain')}</button>
        <button type="button" class="small" data-action="details" onClick=${() => setDetails(n.id)}>${t('admin.hosts.details')}</button>
        <button type="button" class="small danger" data-action="remove" onClick=${() => setAction({ kind: 'remove', node: n })}>${t('admin.hosts.remove')}</button>
      </div>`,
    },
  ];
  const shown = details && nodes.find((n) => n.id === details);
  const tot = fleetTotals(nodes);
  return html`<${Page} title=${t('admin.hosts.title')}>
    <div class="filters">
      ${data ? html`<p data-testid="hosts-summary">${t('admin.hosts.summary', { hosts: fmtNumber(tot.hosts), online: fmtNumber(tot.online), used: fmtNumber(tot.used), total: fmtNumber(tot.total) })}</p>` : null}
      <button type="button" onClick=${() => reload()} disabled=${loading}>${t('admin.common.refresh')}</button>
    </div>
    <${LoadError} error=${error} />
    <${ErrorBox} error=${uncordon.error} />
    ${notice ? html`<p class="notice" role="status">${t('admin.hosts.done', { what: notice })}</p>` : null}
    ${drain ? html`<${DrainResult} result=${drain} onClose=${() => setDrain(null)} />` : null}
    ${loading && !data ? html`<${Spinner} />` : null}
    ${data && !nodes.length ? html`<p>${t('admin.hosts.empty')}</p>` : null}
    ${data && nodes.length
      ? html`<div data-testid="hosts-table"><${Table} columns=${columns} rows=${nodes} caption=${t('admin.hosts.tableLabel')} /></div>`
      : null}
    ${shown
      ? html`<${Dialog} open=${true} wide=${true} title=${shown.hostname} onClose=${() => setDetails(null)}><${HostDetails} node=${shown} /></${Dialog}>`
      : null}
    ${action ? html`<${ActionDialog} action=${action} onClose=${() => setAction(null)} onDone=${done} />` : null}
  </${Page}>`;
}
