// One instance: how to reach it (SSH, service links, Jupyter, a terminal),
// its verbs (stop, start, start without GPUs, restart, release with a typed
// confirmation), its plan, scheduled and idle stops, a bigger data disk,
// and its events. Changes
// arrive through the event stream (lib/events.js).
import { html, useState, useEffect } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtMoney, fmtDateTime, fmtDuration, fmtNumber } from '../lib/format.js';
import { Page, ErrorBox, Field, Table, Badge, Spinner, CopyButton, Confirm, useLoad } from '../lib/components.js';
import { onStream } from '../lib/events.js';
import { Link } from '../lib/router.js';
import { stateBadge, countdowns, stateText } from './common.js';

addMessages({
  en: {
    'inst.back': 'All instances',
    'inst.stop': 'Stop',
    'inst.start': 'Start',
    'inst.start_nogpu': 'Start without GPUs',
    'inst.restart': 'Restart',
    'inst.release': 'Release',
    'inst.terminal': 'Terminal',
    'inst.terminal_close': 'Close terminal',
    'inst.terminal_unavailable': 'The terminal could not be loaded (the console may have been updated): reload the page, or use the SSH command.',
    'inst.no_terminal': 'This host serves no terminal in the browser: use the SSH command.',
    'inst.release_title': 'Release {name}?',
    'inst.release_msg': 'The container and both its disks are deleted; the data cannot be recovered. Billing stops.',
    'inst.overview': 'Overview',
    'inst.id': 'ID',
    'inst.region': 'Region',
    'inst.host': 'Host',
    'inst.gpus': 'GPUs',
    'inst.gpu_indices': 'GPU indices',
    'inst.simulated': 'simulated',
    'inst.image': 'Image',
    'inst.cpu_mem': 'CPU / memory',
    'inst.disks': 'System / data disk',
    'inst.mode': 'Mode',
    'inst.plan': 'Billing',
    'inst.rate': 'Now per hour',
    'inst.charged': 'Charged so far',
    'inst.created': 'Created',
    'inst.message': 'Host says',
    'inst.hint': 'Hint',
    'inst.clocks': 'Clocks',
    'inst.ssh': 'SSH',
    'inst.ssh_cmd': 'Command',
    'inst.password': 'Root password',
    'inst.show': 'Show',
    'inst.hide': 'Hide',
    'inst.copy_cmd': 'Copy SSH command',
    'inst.copy_pw': 'Copy password',
    'inst.ssh_note': 'Your SSH keys work too (SSH keys & tokens).',
    'inst.services': 'Services',
    'inst.port': 'Port',
    'inst.link': 'Link',
    'inst.access': 'Access',
    'inst.public': 'public',
    'inst.private': 'private (your link only)',
    'inst.make_public': 'Make public',
    'inst.make_private': 'Make private',
    'inst.remove': 'Remove',
    'inst.open': 'Open',
    'inst.add_port': 'Publish a port',
    'inst.add': 'Add',
    'inst.jupyter': 'JupyterLab',
    'inst.desktop': 'Desktop',
    'inst.tensorboard': 'TensorBoard',
    'inst.services_note': 'Start a server inside on one of these ports (bind 0.0.0.0), then open its link. A private link carries its own access token: share it only with people who may use the service.',
    'inst.plan_title': 'Billing plan',
    'inst.plan_change': 'Change plan',
    'inst.auto_renew': 'Renew at the end',
    'inst.plan_note': 'A plan is charged up front; going back to pay-as-you-go refunds the unused part.',
    'inst.plan_expires': 'Ends {time}',
    'inst.sched': 'Scheduled stop',
    'inst.sched_none': 'None.',
    'inst.sched_at': 'Stops at {time}.',
    'inst.sched_in': 'Stop in (minutes)',
    'inst.sched_at_label': 'or at',
    'inst.sched_set': 'Schedule',
    'inst.sched_cancel': 'Cancel the scheduled stop',
    'inst.idle': 'Idle stop',
    'inst.idle_off': 'Off.',
    'inst.idle_on': 'Stops after {d} idle ({source}).',
    'inst.idle_src.instance': 'its own setting',
    'inst.idle_src.account': "the account's default",
    'inst.idle_since': 'Idle since {time}.',
    'inst.idle_minutes': 'Idle minutes (0 = off)',
    'inst.idle_set': 'Set',
    'inst.idle_inherit': "Follow the account's default",
    'inst.events': 'Events',
    'inst.ev_time': 'Time',
    'inst.ev_kind': 'Event',
    'inst.ev_state': 'State',
    'inst.ev_msg': 'Message',
    'inst.done': 'Done.',
    'inst.disk_title': 'Resize data disk',
    'inst.disk_now': 'The data disk is {gib} GiB.',
    'inst.disk_new': 'New size (GiB)',
    'inst.disk_grow': 'Grow',
    'inst.disk_note': 'A disk only grows. A running instance sees the new size within seconds (df -h /root/data); a stopped one from its next start. Billed at the new size from now.',
  },
  zh: {
    'inst.back': '全部实例',
    'inst.stop': '关机',
    'inst.start': '开机',
    'inst.start_nogpu': '无卡模式开机',
    'inst.restart': '重启',
    'inst.release': '释放',
    'inst.terminal': '终端',
    'inst.terminal_close': '关闭终端',
    'inst.terminal_unavailable': '终端未能加载（控制台可能已更新）：请刷新页面，或使用 SSH 指令。',
    'inst.no_terminal': '这台主机不提供网页终端：请使用 SSH 指令。',
    'inst.release_title': '释放 {name}？',
    'inst.release_msg': '容器和两块磁盘将被删除，数据无法恢复。计费停止。',
    'inst.overview': '概览',
    'inst.id': 'ID',
    'inst.region': '地区',
    'inst.host': '主机',
    'inst.gpus': 'GPU',
    'inst.gpu_indices': 'GPU 编号',
    'inst.simulated': '模拟',
    'inst.image': '镜像',
    'inst.cpu_mem': 'CPU / 内存',
    'inst.disks': '系统盘 / 数据盘',
    'inst.mode': '模式',
    'inst.plan': '计费',
    'inst.rate': '当前每小时',
    'inst.charged': '累计扣费',
    'inst.created': '创建时间',
    'inst.message': '主机消息',
    'inst.hint': '提示',
    'inst.clocks': '倒计时',
    'inst.ssh': 'SSH 登录',
    'inst.ssh_cmd': '登录指令',
    'inst.password': 'root 密码',
    'inst.show': '显示',
    'inst.hide': '隐藏',
    'inst.copy_cmd': '复制登录指令',
    'inst.copy_pw': '复制密码',
    'inst.ssh_note': '你的 SSH 公钥同样可以登录（见 SSH 密钥与令牌）。',
    'inst.services': '服务',
    'inst.port': '端口',
    'inst.link': '链接',
    'inst.access': '访问',
    'inst.public': '公开',
    'inst.private': '私有（仅凭你的链接）',
    'inst.make_public': '设为公开',
    'inst.make_private': '设为私有',
    'inst.remove': '移除',
    'inst.open': '打开',
    'inst.add_port': '开放端口',
    'inst.add': '添加',
    'inst.jupyter': 'JupyterLab',
    'inst.desktop': '桌面',
    'inst.tensorboard': 'TensorBoard',
    'inst.services_note': '在实例内的这些端口上启动服务（监听 0.0.0.0），再打开链接。私有链接带有访问令牌，只分享给可以使用该服务的人。',
    'inst.plan_title': '计费方式',
    'inst.plan_change': '更改',
    'inst.auto_renew': '到期自动续费',
    'inst.plan_note': '包日/周/月预先扣费；改回按量计费会退还未使用的部分。',
    'inst.plan_expires': '{time} 到期',
    'inst.sched': '定时关机',
    'inst.sched_none': '未设置。',
    'inst.sched_at': '将于 {time} 关机。',
    'inst.sched_in': '多少分钟后关机',
    'inst.sched_at_label': '或在此时',
    'inst.sched_set': '设置',
    'inst.sched_cancel': '取消定时关机',
    'inst.idle': '闲置关机',
    'inst.idle_off': '关闭。',
    'inst.idle_on': '闲置 {d} 后关机（{source}）。',
    'inst.idle_src.instance': '单独设置',
    'inst.idle_src.account': '账号默认值',
    'inst.idle_since': '自 {time} 起闲置。',
    'inst.idle_minutes': '闲置分钟数（0 为关闭）',
    'inst.idle_set': '设置',
    'inst.idle_inherit': '使用账号默认值',
    'inst.events': '事件',
    'inst.ev_time': '时间',
    'inst.ev_kind': '事件',
    'inst.ev_state': '状态',
    'inst.ev_msg': '说明',
    'inst.done': '完成。',
    'inst.disk_title': '数据盘扩容',
    'inst.disk_now': '数据盘现为 {gib} GiB。',
    'inst.disk_new': '新容量（GiB）',
    'inst.disk_grow': '扩容',
    'inst.disk_note': '数据盘只能扩容，不能缩小。运行中的实例几秒内即可看到新容量（df -h /root/data）；关机的实例在下次开机时生效。自此刻起按新容量计费。',
  },
});

const portName = (p) =>
  p.app === 'jupyter' ? t('inst.jupyter') : p.app === 'desktop' ? t('inst.desktop') : p.port === 6006 ? t('inst.tensorboard') : '';

function Services({ inst, onError }) {
  const ports = useLoad(() => api.get(`/v1/instances/${inst.id}/ports`), [inst.id, inst.state]);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const act = async (fn) => {
    setBusy(true);
    setErr(null);
    try {
      await fn();
      await ports.reload();
    } catch (e) {
      setErr(e);
    }
    setBusy(false);
  };
  const add = (e) => {
    e.preventDefault();
    const f = e.target;
    const port = Number(f.port.value);
    act(() => api.post(`/v1/instances/${inst.id}/ports`, { port, public: f.public.checked })).then(() => f.reset());
  };
  const data = ports.data;
  const cols = [
    { key: 'port', label: t('inst.port'), class: 'num', render: (p) => html`${p.port} <span class="muted">${portName(p)}</span>` },
    {
      key: 'url',
      label: t('inst.link'),
      render: (p) => html`<a href=${p.access_url} target="_blank" rel="noopener noreferrer" class="service-link" data-port=${p.port}>${p.url}</a>`,
    },
    { key: 'public', label: t('inst.access'), render: (p) => html`<${Badge} kind=${p.public ? 'warn' : 'muted'}>${p.public ? t('inst.public') : t('inst.private')}<//>` },
    {
      key: 'act',
      label: '',
      render: (p) => html`<div class="row-actions">
        <${CopyButton} text=${p.access_url} label=${t('c.copy') + ' ' + p.port} class="small" />
        <button type="button" class="small" disabled=${busy} onClick=${() => act(() => api.post(`/v1/instances/${inst.id}/ports`, { port: p.port, public: !p.public }))}>
          ${p.public ? t('inst.make_private') : t('inst.make_public')}<span class="sr-only"> ${p.port}</span></button>
        <button type="button" class="small" disabled=${busy} onClick=${() => act(() => api.del(`/v1/instances/${inst.id}/ports/${p.port}`))}>
          ${t('inst.remove')}<span class="sr-only"> ${p.port}</span></button>
      </div>`,
    },
  ];
  return html`<section class="card services" aria-labelledby="svc-h">
    <h2 id="svc-h">${t('inst.services')}</h2>
    <${ErrorBox} error=${ports.error && ports.error.code !== 'instance_released' ? ports.error : null} />
    ${data && data.jupyter
      ? html`<p><a class="button primary" id="jupyter-link" href=${data.jupyter.url} target="_blank" rel="noopener noreferrer">${t('inst.jupyter')}</a></p>`
      : null}
    ${data && data.desktop
      ? html`<p><a class="button primary" id="desktop-link" href=${data.desktop.url} target="_blank" rel="noopener noreferrer">${t('inst.desktop')}</a></p>`
      : null}
    ${data ? html`<${Table} columns=${cols} rows=${data.items} rowKey=${(p) => p.port} caption=${t('inst.services')} />` : ports.error ? null : html`<${Spinner} />`}
    <p class="hint">${t('inst.services_note')}</p>
    <form class="filters" onSubmit=${add}>
      <${Field} label=${t('inst.add_port')}><input type="number" name="port" min="1" max="65535" required /><//>
      <label class="check"><input type="checkbox" name="public" /> ${t('inst.public')}</label>
      <button type="submit" disabled=${busy}>${t('inst.add')}</button>
    </form>
    <${ErrorBox} error=${err} />
  </section>`;
}

function PlanBox({ inst, setInst }) {
  const [err, setErr] = useState(null);
  const [ok, setOk] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setErr(null);
    setOk(false);
    const f = e.target;
    const body = { plan: f.plan.value };
    if (body.plan !== 'payg') body.auto_renew = f.auto_renew.checked;
    try {
      setInst(await api.post(`/v1/instances/${inst.id}/plan`, body));
      setOk(true);
    } catch (x) {
      setErr(x);
    }
  };
  return html`<section class="card" aria-labelledby="plan-h">
    <h2 id="plan-h">${t('inst.plan_title')}</h2>
    <p>${t('plan.' + inst.plan)}${inst.plan !== 'payg' ? html` · ${fmtMoney(inst.plan_price_micros)} · ${t('inst.plan_expires', { time: fmtDateTime(inst.plan_expires_at) })}` : null}</p>
    <form class="filters" onSubmit=${submit} id="plan-form">
      <${Field} label=${t('inst.plan')}>
        <select name="plan" value=${inst.plan}>
          ${['payg', 'day', 'week', 'month'].map((p) => html`<option value=${p}>${t('plan.' + p)}</option>`)}
        </select>
      <//>
      <label class="check"><input type="checkbox" name="auto_renew" checked=${inst.auto_renew} /> ${t('inst.auto_renew')}</label>
      <button type="submit">${t('inst.plan_change')}</button>
      ${ok ? html`<span role="status">${t('inst.done')}</span>` : null}
    </form>
    <p class="hint">${t('inst.plan_note')}</p>
    <${ErrorBox} error=${err} />
  </section>`;
}

function StopsBox({ inst, setInst }) {
  const [err, setErr] = useState(null);
  const call = async (path, body) => {
    setErr(null);
    try {
      setInst(await api.post(`/v1/instances/${inst.id}/${path}`, body));
      return true;
    } catch (x) {
      setErr(x);
      return false;
    }
  };
  const sched = (e) => {
    e.preventDefault();
    const f = e.target;
    // a time (the browser's local time, sent with its offset as UTC) or minutes from now
    const body = f.at.value ? { at: new Date(f.at.value).toISOString() } : { in_seconds: Math.round(Number(f.minutes.value) * 60) };
    call('stop', body).then((ok) => ok && f.reset());
  };
  const idle = (e) => {
    e.preventDefault();
    call('idle-stop', { after_seconds: Math.round(Number(e.target.minutes.value) * 60) });
  };
  return html`<section class="card" aria-labelledby="stops-h">
    <h2 id="stops-h">${t('inst.sched')}</h2>
    <p>${inst.stop_at ? t('inst.sched_at', { time: fmtDateTime(inst.stop_at) }) : t('inst.sched_none')}</p>
    <form class="filters" onSubmit=${sched}>
      <${Field} label=${t('inst.sched_in')}><input type="number" name="minutes" min="1" step="1" /><//>
      <${Field} label=${t('inst.sched_at_label')}><input type="datetime-local" name="at" /><//>
      <button type="submit">${t('inst.sched_set')}</button>
      ${inst.stop_at ? html`<button type="button" onClick=${() => call('stop', { cancel: true })}>${t('inst.sched_cancel')}</button>` : null}
    </form>
    <h2>${t('inst.idle')}</h2>
    <p>
      ${inst.idle_stop_after_seconds
        ? t('inst.idle_on', { d: fmtDuration(inst.idle_stop_after_seconds), source: t('inst.idle_src.' + inst.idle_stop_source) })
        : t('inst.idle_off')}
      ${inst.idle_since ? ' ' + t('inst.idle_since', { time: fmtDateTime(inst.idle_since) }) : ''}
    </p>
    <form class="filters" onSubmit=${idle}>
      <${Field} label=${t('inst.idle_minutes')}>
        <input type="number" name="minutes" min="0" step="1" value=${inst.idle_stop_after_seconds ? Math.round(inst.idle_stop_after_seconds / 60) : 0} />
      <//>
      <button type="submit">${t('inst.idle_set')}</button>
      ${inst.idle_stop_source !== 'account' ? html`<button type="button" onClick=${() => call('idle-stop', { inherit: true })}>${t('inst.idle_inherit')}</button>` : null}
    </form>
    <${ErrorBox} error=${err} />
  </section>`;
}

function DiskBox({ inst, setInst }) {
  const [err, setErr] = useState(null);
  const [ok, setOk] = useState(false);
  const canResize = inst.state === 'running' || inst.state === 'stopped';
  const submit = async (e) => {
    e.preventDefault();
    setErr(null);
    setOk(false);
    try {
      setInst(await api.post(`/v1/instances/${inst.id}/disk`, { data_disk_gib: Number(e.target.gib.value) }));
      setOk(true);
    } catch (x) {
      setErr(x);
    }
  };
  return html`<section class="card" aria-labelledby="disk-h">
    <h2 id="disk-h">${t('inst.disk_title')}</h2>
    <p>${t('inst.disk_now', { gib: inst.data_disk_gib })}</p>
    <form class="filters" onSubmit=${submit} id="disk-form">
      <${Field} label=${t('inst.disk_new')}><input type="number" name="gib" min=${inst.data_disk_gib + 1} step="1" required /><//>
      <button type="submit" disabled=${!canResize}>${t('inst.disk_grow')}</button>
      ${ok ? html`<span role="status">${t('inst.done')}</span>` : null}
    </form>
    <p class="hint">${t('inst.disk_note')}</p>
    <${ErrorBox} error=${err} />
  </section>`;
}

function Events({ inst }) {
  const ev = useLoad(() => api.all(`/v1/instances/${inst.id}/events`, {}, 2000), [inst.id]);
  useEffect(
    () =>
      onStream('event', (e) => {
        if (e.instance_id !== inst.id) return;
        ev.setData((items) => (items && !items.some((x) => x.seq === e.seq) ? [...items, e] : items));
      }),
    [inst.id],
  );
  const rows = ev.data ? ev.data.slice().reverse().slice(0, 200) : undefined;
  const cols = [
    { key: 'created_at', label: t('inst.ev_time'), render: (e) => fmtDateTime(e.created_at) },
    { key: 'kind', label: t('inst.ev_kind'), render: (e) => html`<code>${e.kind}</code>${e.reason ? html` <span class="muted">${e.reason}</span>` : null}` },
    { key: 'state', label: t('inst.ev_state'), render: (e) => stateText(e.state) },
    { key: 'message', label: t('inst.ev_msg') },
  ];
  return html`<section aria-labelledby="ev-h">
    <h2 id="ev-h">${t('inst.events')}</h2>
    <${ErrorBox} error=${ev.error} />
    <${Table} columns=${cols} rows=${rows} error=${ev.error} rowKey=${(e) => e.seq} caption=${t('inst.events')} />
  </section>`;
}

// A part of the page that is a chunk of its own, loaded on first use:
// null while it loads, then {C} (C null when the chunk failed to load, as
// after a deploy mid-session).
function useChunk(load) {
  const [mod, setMod] = useState(null);
  useEffect(() => {
    let live = true;
    load().then(
      (m) => live && setMod({ C: m && m.default ? m.default : null }),
      () => live && setMod({ C: null }),
    );
    return () => {
      live = false;
    };
  }, []);
  return mod;
}

function TerminalBox({ inst, onClose }) {
  // terminal.js (xterm.js): a chunk that fails to load says the terminal
  // is unavailable
  const mod = useChunk(() => import('./terminal.js'));
  if (!mod) return html`<${Spinner} />`;
  if (!mod.C) return html`<p class="warnbox" role="status">${t('inst.terminal_unavailable')}</p>`;
  const C = mod.C;
  return html`<section class="card" aria-label=${t('inst.terminal')}>
    <div class="buttons" style="margin-top:0"><button type="button" onClick=${onClose}>${t('inst.terminal_close')}</button></div>
    <${C} instance=${inst} />
  </section>`;
}

// The charts (charts.js, uPlot): a chunk that fails to load leaves the
// rest of the page working.
function MetricsBox({ inst }) {
  const mod = useChunk(() => import('./charts.js'));
  if (!mod) return html`<${Spinner} />`;
  if (!mod.C) return null;
  const C = mod.C;
  return html`<${C} instance=${inst} />`;
}

export default function Instance({ id }) {
  const inst = useLoad(() => api.get('/v1/instances/' + encodeURIComponent(id)), [id]);
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState('');
  const [releasing, setReleasing] = useState(false);
  const [showPw, setShowPw] = useState(false);
  const [term, setTerm] = useState(false);
  const [now, setNow] = useState(Date.now());
  useEffect(() => onStream('instance', (x) => x.id === id && inst.setData(x)), [id]);
  useEffect(() => {
    const i = setInterval(() => setNow(Date.now()), 30000);
    return () => clearInterval(i);
  }, []);
  const i = inst.data;
  if (!i) return html`<${Page} title=${id}><${ErrorBox} error=${inst.error} />${inst.error ? null : html`<${Spinner} />`}<//>`;

  const verb = async (name, body) => {
    setBusy(name);
    setErr(null);
    try {
      inst.setData(await api.post(`/v1/instances/${i.id}/${name}`, body));
      setBusy('');
      return true;
    } catch (e) {
      setErr(e);
      setBusy('');
      return false;
    }
  };
  const s = i.state;
  const canStop = ['creating', 'running', 'starting', 'failed'].includes(s);
  const canStart = s === 'stopped' || s === 'failed';
  const gone = s === 'released' || s === 'releasing';
  const title = i.name || i.id;
  const clocks = countdowns(i, now);
  const sshReady = i.ssh && i.ssh.command && !gone;
  // its host's agent serves terminals (not without nginx, nor in a chroot)
  const canTerm = s === 'running' && i.terminal !== false;

  const actions = html`
    ${canStop ? html`<button type="button" disabled=${!!busy} onClick=${() => verb('stop')}>${t('inst.stop')}</button>` : null}
    ${canStart ? html`<button type="button" class="primary" disabled=${!!busy} onClick=${() => verb('start', { mode: 'gpu' })}>${t('inst.start')}</button>` : null}
    ${canStart ? html`<button type="button" disabled=${!!busy} onClick=${() => verb('start', { mode: 'nogpu' })}>${t('inst.start_nogpu')}</button>` : null}
    ${s === 'running' ? html`<button type="button" disabled=${!!busy} onClick=${() => verb('restart')}>${t('inst.restart')}</button>` : null}
    ${canTerm ? html`<button type="button" aria-pressed=${term} onClick=${() => setTerm(!term)}>${t('inst.terminal')}</button>` : null}
    ${!gone ? html`<button type="button" class="danger" disabled=${!!busy} onClick=${() => setReleasing(true)}>${t('inst.release')}</button>` : null}`;

  return html`<${Page} title=${title} actions=${actions}>
    <p><${Link} href="/instances">← ${t('inst.back')}<//> · ${stateBadge(i)} <span class="muted">${t('mode.' + i.mode)}</span></p>
    <${ErrorBox} error=${err} />
    ${i.state_message ? html`<p class="warnbox">${t('inst.message')}: ${i.state_message}</p>` : null}
    ${(i.hints || []).map((h) => html`<p class="warnbox" role="status" data-hint=${h.kind}>${t('inst.hint')}: ${h.message}</p>`)}
    ${term && canTerm ? html`<${TerminalBox} inst=${i} onClose=${() => setTerm(false)} />` : null}
    <div class="grid">
      <section class="card" aria-labelledby="ov-h">
        <h2 id="ov-h" style="margin-top:0">${t('inst.overview')}</h2>
        <dl class="kv">
          <dt>${t('inst.id')}</dt><dd class="mono">${i.id}</dd>
          <dt>${t('inst.region')}</dt><dd>${i.region}</dd>
          <dt>${t('inst.host')}</dt><dd class="mono">${i.node_id}</dd>
          <dt>${t('inst.gpus')}</dt><dd>${i.gpu_model} × ${i.gpus} ${i.simulated_gpus ? html`<${Badge} kind="info">${t('inst.simulated')}<//>` : null}</dd>
          <dt>${t('inst.gpu_indices')}</dt><dd>${i.gpu_indices.length ? i.gpu_indices.join(', ') : '—'}</dd>
          <dt>${t('inst.image')}</dt><dd>${i.image}</dd>
          <dt>${t('inst.cpu_mem')}</dt><dd>${fmtNumber(i.cpu_cores, 2)} / ${fmtNumber(Math.round(i.memory_mib / 1024))} GiB</dd>
          <dt>${t('inst.disks')}</dt><dd>${i.system_disk_gib} / ${i.data_disk_gib} GiB</dd>
          <dt>${t('inst.plan')}</dt><dd>${t('plan.' + i.plan)}</dd>
          <dt>${t('inst.rate')}</dt><dd>${fmtMoney(i.rate_per_hour_micros)}</dd>
          <dt>${t('inst.charged')}</dt><dd>${fmtMoney(i.charged_micros)}</dd>
          <dt>${t('inst.created')}</dt><dd>${fmtDateTime(i.created_at)}</dd>
          ${clocks.length ? html`<dt>${t('inst.clocks')}</dt><dd>${clocks.join(' · ')}</dd>` : null}
        </dl>
      </section>
      <section class="card" aria-labelledby="ssh-h">
        <h2 id="ssh-h" style="margin-top:0">${t('inst.ssh')}</h2>
        ${sshReady
          ? html`<dl class="kv">
              <dt>${t('inst.ssh_cmd')}</dt>
              <dd class="cmd"><code id="ssh-command">${i.ssh.command}</code> <${CopyButton} text=${i.ssh.command} label=${t('inst.copy_cmd')} class="small" id="copy-ssh-command" /></dd>
              <dt>${t('inst.password')}</dt>
              <dd class="cmd"><code id="ssh-password">${showPw ? i.ssh.password : '••••••••'}</code>
                <button type="button" class="small" aria-pressed=${showPw} onClick=${() => setShowPw(!showPw)}>${showPw ? t('inst.hide') : t('inst.show')}</button>
                <${CopyButton} text=${i.ssh.password} label=${t('inst.copy_pw')} class="small" id="copy-ssh-password" /></dd>
            </dl>
            <p class="hint">${t('inst.ssh_note')}</p>
            ${s === 'running' && i.terminal === false ? html`<p class="hint" data-no-terminal>${t('inst.no_terminal')}</p>` : null}`
          : html`<p class="muted">—</p>`}
      </section>
    </div>
    ${!gone ? html`<${Services} inst=${i} />` : null}
    ${!gone && s !== 'creating' ? html`<${MetricsBox} inst=${i} />` : null}
    ${!gone
      ? html`<div class="grid"><${PlanBox} inst=${i} setInst=${inst.setData} /><${StopsBox} inst=${i} setInst=${inst.setData} /></div>`
      : null}
    ${!gone ? html`<${DiskBox} inst=${i} setInst=${inst.setData} />` : null}
    <${Events} inst=${i} />
    <${Confirm} open=${releasing} title=${t('inst.release_title', { name: title })} message=${t('inst.release_msg')} word=${title}
      confirmLabel=${t('inst.release')} danger busy=${busy === 'release'} error=${err}
      onClose=${() => setReleasing(false)}
      onConfirm=${async () => {
        if (await verb('release', {})) setReleasing(false);
      }} />
  <//>`;
}
