// An instance's metrics as charts (docs/design/metrics.md): CPU, memory,
// GPUs, disks and network over a chosen window, from GET
// /v1/instances/{id}/metrics. Its own chunk (uPlot), loaded by the instance
// page. Series the host does not measure (a simulated GPU has no NVML) are
// not drawn: the page says why, as the API does.
import uPlot from 'uplot';
import uplotCss from 'uplot/dist/uPlot.min.css' with { type: 'text' };
import { html, useEffect, useRef, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';

addMessages({
  en: {
    'charts.title': 'Monitoring',
    'charts.window': 'Window',
    'charts.cpu': 'CPU (of its share)',
    'charts.memory': 'Memory',
    'charts.gpu': 'GPU utilisation',
    'charts.gpu_memory': 'GPU memory',
    'charts.disks': 'Disks used',
    'charts.io': 'Disk reads / writes',
    'charts.net': 'Network in / out',
    'charts.none': 'No samples in this window yet: the host reports them every few seconds while the instance runs.',
    'charts.absent': 'Not measured: {why} ({what}).',
    'charts.limit': 'limit',
    'charts.used': 'used',
    'charts.system': 'system disk',
    'charts.data': 'data disk',
    'charts.read': 'read',
    'charts.write': 'write',
    'charts.in': 'in',
    'charts.out': 'out',
  },
  zh: {
    'charts.title': '监控',
    'charts.window': '时间范围',
    'charts.cpu': 'CPU（占配额）',
    'charts.memory': '内存',
    'charts.gpu': 'GPU 利用率',
    'charts.gpu_memory': 'GPU 显存',
    'charts.disks': '磁盘使用',
    'charts.io': '磁盘读 / 写',
    'charts.net': '网络入 / 出',
    'charts.none': '此时间范围内还没有数据：实例运行时主机每隔几秒上报一次。',
    'charts.absent': '未测量：{why}（{what}）。',
    'charts.limit': '上限',
    'charts.used': '已用',
    'charts.system': '系统盘',
    'charts.data': '数据盘',
    'charts.read': '读',
    'charts.write': '写',
    'charts.in': '入',
    'charts.out': '出',
  },
});

const WINDOWS = [
  ['1h', 3600],
  ['6h', 6 * 3600],
  ['1d', 86400],
  ['7d', 7 * 86400],
  ['30d', 30 * 86400],
];
const COLUMNS = 300; // points across a chart at most
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4b5563', '#ca8a04'];

function addStyle() {
  if (document.getElementById('uplot-css')) return;
  const s = document.createElement('style');
  s.id = 'uplot-css';
  s.textContent = uplotCss;
  document.head.appendChild(s);
}

const bytes = (v) => {
  if (v == null) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return (i && Math.abs(v) < 10 ? v.toFixed(1) : Math.round(v)) + ' ' + u[i];
};
const FORMATS = {
  bytes,
  'bytes/s': (v) => (v == null ? '—' : bytes(v) + '/s'),
  ratio: (v) => (v == null ? '—' : Math.round(v * 100) + '%'),
  percent: (v) => (v == null ? '—' : Math.round(v) + '%'),
};
const fmt = (unit) => FORMATS[unit] || ((v) => (v == null ? '—' : String(Math.round(v * 100) / 100)));

// The charts: each a title and its lines, [series name or a test on names,
// label]. GPU lines are every gpuK_ series of the answer.
const gpuLines = (suffix) => (names) =>
  names.filter((n) => /^gpu\d+_/.test(n) && n.endsWith('_' + suffix)).map((n) => [n, n.split('_')[0]]);
const CHARTS = [
  ['charts.cpu', () => [['cpu_share', 'CPU']]],
  ['charts.memory', () => [['memory_used_bytes', 'charts.used'], ['memory_limit_bytes', 'charts.limit']]],
  ['charts.gpu', gpuLines('utilization_percent')],
  ['charts.gpu_memory', gpuLines('memory_used_bytes')],
  ['charts.disks', () => [['system_disk_used_bytes', 'charts.system'], ['data_disk_used_bytes', 'charts.data']]],
  ['charts.io', () => [['disk_read_bytes_per_second', 'charts.read'], ['disk_write_bytes_per_second', 'charts.write']]],
  ['charts.net', () => [['network_rx_bytes_per_second', 'charts.in'], ['network_tx_bytes_per_second', 'charts.out']]],
];

// uPlot's data: one x array (every t of the lines), a y array per line
// with null where that line has no point.
function toData(series, lines) {
  const ts = new Set();
  for (const [name] of lines) for (const [x] of series[name] || []) ts.add(x);
  const xs = [...ts].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const ys = lines.map(([name]) => {
    const y = new Array(xs.length).fill(null);
    for (const [x, v] of series[name] || []) y[at.get(x)] = v;
    return y;
  });
  return [xs, ...ys];
}

function Chart({ title, lines, answer }) {
  const box = useRef(null);
  useEffect(() => {
    const el = box.current;
    if (!el) return undefined;
    const unit = (answer.units || {})[lines[0][0]] || '';
    const f = fmt(unit);
    const plot = new uPlot(
      {
        width: Math.max(240, el.clientWidth || 320),
        height: 160,
        scales: { x: { time: true, range: [Date.parse(answer.from) / 1000, Date.parse(answer.to) / 1000] } },
        axes: [{}, { values: (u, vals) => vals.map(f), size: 70 }],
        series: [
          {},
          ...lines.map(([, label], i) => ({
            label: label.startsWith('charts.') ? t(label) : label,
            stroke: COLORS[i % COLORS.length],
            width: 1.5,
            value: (u, v) => f(v),
            spanGaps: false,
          })),
        ],
        legend: { live: true },
      },
      toData(answer.series || {}, lines),
      el,
    );
    return () => plot.destroy();
  }, [answer, lines.map((l) => l[0]).join(',')]);
  return html`<figure class="chart" data-chart=${title}>
    <figcaption>${t(title)}</figcaption>
    <div ref=${box}></div>
  </figure>`;
}

export default function Charts({ instance }) {
  const [win, setWin] = useState(3600);
  const [answer, setAnswer] = useState(null);
  const [err, setErr] = useState(null);
  addStyle();
  useEffect(() => {
    let live = true;
    const load = async () => {
      const to = Math.floor(Date.now() / 1000);
      const step = Math.max(10, Math.ceil(win / COLUMNS));
      try {
        const a = await api.get(
          `/v1/instances/${encodeURIComponent(instance.id)}/metrics?from=${to - win}&to=${to}&step=${step}`,
        );
        if (live) {
          setAnswer(a);
          setErr(null);
        }
      } catch (e) {
        if (live) setErr(e);
      }
    };
    load();
    // the newest samples arrive with each heartbeat; a long window changes slowly
    const every = win <= 6 * 3600 ? 10000 : 60000;
    const i = setInterval(load, every);
    return () => {
      live = false;
      clearInterval(i);
    };
  }, [instance.id, win]);

  const series = (answer && answer.series) || {};
  const names = Object.keys(series);
  const shown = CHARTS.map(([title, pick]) => [title, pick(names).filter(([n]) => series[n] && series[n].length)]).filter(
    ([, lines]) => lines.length,
  );
  // one line per reason: "simulated GPU: no NVML (gpu0_..., gpu1_...)"
  const reasons = {};
  for (const [name, why] of Object.entries((answer && answer.absent) || {})) (reasons[why] = reasons[why] || []).push(name);

  return html`<section class="card" aria-labelledby="charts-h" data-charts>
    <h2 id="charts-h" style="margin-top:0">${t('charts.title')}</h2>
    <div class="buttons" role="group" aria-label=${t('charts.window')} style="margin-top:0">
      ${WINDOWS.map(
        ([label, s]) =>
          html`<button type="button" class="small" aria-pressed=${win === s} onClick=${() => setWin(s)}>${label}</button>`,
      )}
    </div>
    ${err ? html`<p class="warnbox" role="status">${err.message}</p>` : null}
    ${answer && !shown.length ? html`<p class="muted" data-no-samples>${t('charts.none')}</p>` : null}
    <div class="charts">
      ${shown.map(([title, lines]) => html`<${Chart} key=${title} title=${title} lines=${lines} answer=${answer} />`)}
    </div>
    ${Object.entries(reasons).map(
      ([why, what]) => html`<p class="hint" data-absent>${t('charts.absent', { why, what: what.join(', ') })}</p>`,
    )}
  </section>`;
}
