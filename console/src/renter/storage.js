// Your file storage: the directory of each region mounted at /root/storage
// (and /root/autodl-fs) in every instance of yours there, with its use,
// quota, free size, price and what it costs per day now; and a file browser
// per region: list, open folders, download, upload (server/files.h: a
// one-use ticket from the API, then the host's files address).
import { html, useState, useEffect } from '../lib/ui.js';
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
    'fs.title': 'Files in {region}',
    'fs.top': 'storage',
    'fs.browse': 'Browse, upload and download files',
    'fs.name': 'Name',
    'fs.size': 'Size',
    'fs.mtime': 'Modified',
    'fs.empty': 'This folder is empty.',
    'fs.download': 'Download',
    'fs.upload': 'Upload a file here',
    'fs.uploading': 'Uploading {name}',
    'fs.uploaded': '{name} uploaded',
    'fs.up': 'Up one folder',
    'fs.link': 'link (not followed)',
    'fs.other': 'not a file',
    'fs.truncated': 'Only the first {n} entries are shown.',
    'fs.network': 'The host did not answer: try again',
    'fs.about': 'Files are served by the host of one of your running instances in this region.',
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
    'fs.title': '{region} 的文件',
    'fs.top': '存储',
    'fs.browse': '浏览、上传和下载文件',
    'fs.name': '名称',
    'fs.size': '大小',
    'fs.mtime': '修改时间',
    'fs.empty': '此文件夹为空。',
    'fs.download': '下载',
    'fs.upload': '上传文件到此处',
    'fs.uploading': '正在上传 {name}',
    'fs.uploaded': '{name} 已上传',
    'fs.up': '返回上一级',
    'fs.link': '链接（不跟随）',
    'fs.other': '不是普通文件',
    'fs.truncated': '只显示前 {n} 项。',
    'fs.network': '主机没有响应：请重试',
    'fs.about': '文件由你在该地区一台运行中实例所在的主机提供。',
  },
});

const join = (dir, name) => (dir ? dir + '/' + name : name);

// A one-use ticket for op on path of the region's storage (server/files.h).
const ticket = (region, op, path) =>
  api.post(`/v1/storage/${encodeURIComponent(region)}/files`, { op, path }, { idempotent: false });

// The host's answer's text as an error (its refusals are plain text).
async function failure(res) {
  const text = (await res.text().catch(() => '')).trim();
  return new Error(text || `HTTP ${res.status}`);
}

function put(url, file, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open('PUT', url);
    x.upload.onprogress = (e) => e.lengthComputable && onProgress(e.loaded / e.total);
    x.onload = () => (x.status === 201 ? resolve() : reject(new Error((x.responseText || '').trim() || `HTTP ${x.status}`)));
    x.onerror = () => reject(new Error(t('fs.network')));
    x.send(file);
  });
}

function Files({ region }) {
  const [dir, setDir] = useState('');
  const [list, setList] = useState(null);
  const [error, setError] = useState(null);
  const [upload, setUpload] = useState(null); // {name, part} while one runs
  const [note, setNote] = useState('');
  const [shown, setShown] = useState(false);
  const id = 'files-' + region.replace(/[^a-zA-Z0-9-]/g, '_');

  async function open(path) {
    setError(null);
    try {
      const tk = await ticket(region, 'list', path);
      const res = await fetch(tk.url, { credentials: 'omit' });
      if (!res.ok) throw await failure(res);
      setList(await res.json());
      setDir(path);
    } catch (e) {
      setError(e);
    }
  }
  useEffect(() => {
    setShown(false);
    setList(null);
  }, [region]);

  async function download(name) {
    setError(null);
    try {
      const tk = await ticket(region, 'get', join(dir, name));
      // a navigation: the host answers with an attachment, the page stays
      const a = document.createElement('a');
      a.href = tk.url;
      a.rel = 'noopener';
      document.body.appendChild(a);
      a.click();
      a.remove();
    } catch (e) {
      setError(e);
    }
  }

  async function send(e) {
    const file = e.target.files && e.target.files[0];
    e.target.value = '';
    if (!file) return;
    setError(null);
    setNote('');
    setUpload({ name: file.name, part: 0 });
    try {
      const tk = await ticket(region, 'put', join(dir, file.name));
      await put(tk.url, file, (part) => setUpload({ name: file.name, part }));
      setNote(t('fs.uploaded', { name: file.name }));
      await open(dir);
    } catch (err) {
      setError(err);
    }
    setUpload(null);
  }

  const crumbs = dir ? dir.split('/') : [];
  const items = list ? [...list.items].sort((a, b) => (a.type === 'dir') !== (b.type === 'dir') ? (a.type === 'dir' ? -1 : 1) : a.name.localeCompare(b.name)) : [];
  const cols = [
    {
      key: 'name',
      label: t('fs.name'),
      render: (f) =>
        f.type === 'dir'
          ? html`<button type="button" class="link" onClick=${() => open(join(dir, f.name))}>${f.name}/</button>`
          : html`<span>${f.name}</span>${f.type === 'link' ? html` <span class="muted">(${t('fs.link')})</span>` : f.type === 'other' ? html` <span class="muted">(${t('fs.other')})</span>` : null}`,
    },
    { key: 'size', label: t('fs.size'), class: 'num', render: (f) => (f.type === 'file' ? fmtBytes(f.size) : '') },
    { key: 'mtime', label: t('fs.mtime'), render: (f) => fmtDateTime(new Date(f.mtime * 1000).toISOString()) },
    {
      key: 'act',
      label: '',
      render: (f) =>
        f.type === 'file'
          ? html`<button type="button" class="small" onClick=${() => download(f.name)}>${t('fs.download')}<span class="sr-only"> ${f.name}</span></button>`
          : null,
    },
  ];
  return html`<section class="files" id=${id} aria-labelledby=${id + '-h'}>
    <h2 id=${id + '-h'}>${t('fs.title', { region })}</h2>
    <p class="muted">${t('fs.about')}</p>
    ${shown
      ? null
      : html`<p><button type="button" class="files-browse" onClick=${() => (setShown(true), open(''))}>${t('fs.browse')}</button></p>`}
    ${shown ? html`<nav class="crumbs" aria-label=${t('fs.title', { region })}>
      <button type="button" class="link" onClick=${() => open('')}>${t('fs.top')}</button>
      ${crumbs.map((c, i) => html` / <button type="button" class="link" onClick=${() => open(crumbs.slice(0, i + 1).join('/'))}>${c}</button>`)}
      ${dir ? html` <button type="button" class="small" onClick=${() => open(crumbs.slice(0, -1).join('/'))}>${t('fs.up')}</button>` : null}
    </nav>` : null}
    <${ErrorBox} error=${error} />
    ${list ? html`<${Table} columns=${cols} rows=${items} rowKey=${(f) => f.name} empty=${t('fs.empty')} caption=${t('fs.title', { region })} />` : null}
    ${list && list.truncated ? html`<p class="muted">${t('fs.truncated', { n: list.items.length })}</p>` : null}
    ${list
      ? html`<p><label for=${id + '-upload'}>${t('fs.upload')}</label> <input type="file" id=${id + '-upload'} class="files-upload" disabled=${!!upload} onChange=${send} /></p>`
      : null}
    ${upload ? html`<p role="status">${t('fs.uploading', { name: upload.name })} <progress max="100" value=${Math.round(upload.part * 100)}></progress></p>` : null}
    ${note ? html`<p role="status" class="files-note">${note}</p>` : null}
  </section>`;
}

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
    ${(st.data || []).map((s) => html`<${Files} key=${s.region} region=${s.region} />`)}
  <//>`;
}
