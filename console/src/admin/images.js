// Images: every image with its state and how many hosts hold it ready
// (GET /v1/images), its state on each host of its region (GET
// /v1/admin/images/{name}/hosts, in a dialog), build one from a recipe (POST /v1/admin/images) and import an
// archive (PUT /v1/admin/images/{name}/archive).
//
// The archive is not JSON, and a change made with the session cookie must be
// JSON (the server's rule against other sites' forms): so the upload goes
// with a short-lived API token made for it (POST /v1/tokens, one day at
// most) as a bearer, as scripts do, and the token is deleted as soon as the
// upload ends, whatever its outcome.
import { html, useState, useEffect } from '../lib/ui.js';
import { api, ApiError } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';
import { fmtBytes, fmtDateTime, fmtNumber } from '../lib/format.js';
import { Page, ErrorBox, Field, Spinner, Badge, Table, Dialog } from '../lib/components.js';
import { useLoad, useAction, LoadError } from './common.js';

addMessages({
  en: {
    'admin.img.title': 'Images',
    'admin.img.hosts': '{n} hosts enrolled.',
    'admin.img.col.name': 'Image',
    'admin.img.col.kind': 'Kind',
    'admin.img.col.state': 'State',
    'admin.img.col.nodes': 'Hosts holding it',
    'admin.img.col.content': 'OS / Python / CUDA / framework',
    'admin.img.col.size': 'Size',
    'admin.img.col.created': 'Added',
    'admin.img.state.ready': 'ready',
    'admin.img.state.building': 'building',
    'admin.img.state.failed': 'failed',
    'admin.img.state.pending': 'pending',
    'admin.img.state.missing': 'not yet reported',
    'admin.img.perHost': 'Per host',
    'admin.img.perHostTitle': '{name} on each host',
    'admin.img.col.host': 'Host',
    'admin.img.col.region': 'Region',
    'admin.img.col.updated': 'Reported',
    'admin.img.noHosts': 'No host in its region.',
    'admin.img.empty': 'No image yet: build one from a recipe or import an archive.',
    'admin.img.build': 'Build an image from a recipe',
    'admin.img.name': 'Name',
    'admin.img.nameHint': 'Lowercase letters, digits, -, . and _, such as debian-12.',
    'admin.img.recipe': 'Recipe',
    'admin.img.recipe.base': 'base: Debian 12 with SSH, Python and the usual tools',
    'admin.img.recipe.jupyter': 'jupyter: base plus Jupyter Notebook',
    'admin.img.recipe.pytorch': "pytorch: base plus Debian's PyTorch and torchvision (CPU)",
    'admin.img.recipe.venv': 'venv: base plus a project environment (/root/venv) and compilers',
    'admin.img.recipe.desktop': 'desktop: base plus an Xfce desktop in the browser (noVNC)',
    'admin.img.region': 'Region',
    'admin.img.everyRegion': 'every host',
    'admin.img.description': 'Description',
    'admin.img.buildSubmit': 'Build',
    'admin.img.built': '{name} is recorded: each host builds it at its next fetch of its desired state.',
    'admin.img.import': 'Import an archive',
    'admin.img.importIntro': 'A rootfs tarball, a docker save tarball or a tarred OCI layout, plain or compressed (gzip, zstd, xz). Hosts fetch it from suanlid and import it.',
    'admin.img.file': 'Archive file',
    'admin.img.kind': 'Kind',
    'admin.img.kind.base': 'base',
    'admin.img.kind.framework': 'framework',
    'admin.img.importSubmit': 'Upload and import',
    'admin.img.noFile': 'Choose the archive to upload.',
    'admin.img.noName': 'Enter the image\'s name.',
    'admin.img.uploading': 'Uploading: {done} of {total}',
    'admin.img.imported': '{name} uploaded ({size}, sha256 {sha}); hosts import it next.',
    'admin.img.list': 'Images',
    'admin.img.network': 'the upload failed: check the connection and try again',
  },
  zh: {
    'admin.img.title': '镜像',
    'admin.img.hosts': '已加入 {n} 台主机。',
    'admin.img.col.name': '镜像',
    'admin.img.col.kind': '类型',
    'admin.img.col.state': '状态',
    'admin.img.col.nodes': '持有的主机数',
    'admin.img.col.content': '系统 / Python / CUDA / 框架',
    'admin.img.col.size': '大小',
    'admin.img.col.created': '添加时间',
    'admin.img.state.missing': '尚未报告',
    'admin.img.perHost': '各主机',
    'admin.img.perHostTitle': '{name} 在各主机上',
    'admin.img.col.host': '主机',
    'admin.img.col.region': '地区',
    'admin.img.col.updated': '报告时间',
    'admin.img.noHosts': '其地区没有主机。',
    'admin.img.state.ready': '就绪',
    'admin.img.state.building': '构建中',
    'admin.img.state.failed': '失败',
    'admin.img.state.pending': '等待中',
    'admin.img.empty': '还没有镜像：请按配方构建或导入归档。',
    'admin.img.build': '按配方构建镜像',
    'admin.img.name': '名称',
    'admin.img.nameHint': '小写字母、数字、-、. 和 _，例如 debian-12。',
    'admin.img.recipe': '配方',
    'admin.img.recipe.base': 'base：Debian 12，含 SSH、Python 和常用工具',
    'admin.img.recipe.jupyter': 'jupyter：base 加 Jupyter Notebook',
    'admin.img.recipe.pytorch': 'pytorch：base 加 Debian 的 PyTorch 与 torchvision（CPU 版）',
    'admin.img.recipe.venv': 'venv：base 加项目环境（/root/venv）与编译工具',
    'admin.img.recipe.desktop': 'desktop：base 加浏览器里的 Xfce 桌面（noVNC）',
    'admin.img.region': '地区',
    'admin.img.everyRegion': '所有主机',
    'admin.img.description': '描述',
    'admin.img.buildSubmit': '构建',
    'admin.img.built': '已记录 {name}：各主机下次获取期望状态时构建。',
    'admin.img.import': '导入归档',
    'admin.img.importIntro': 'rootfs 压缩包、docker save 压缩包或打包的 OCI 布局，可不压缩或用 gzip、zstd、xz 压缩。主机从 suanlid 获取并导入。',
    'admin.img.file': '归档文件',
    'admin.img.kind': '类型',
    'admin.img.kind.base': '基础',
    'admin.img.kind.framework': '框架',
    'admin.img.importSubmit': '上传并导入',
    'admin.img.noFile': '请选择要上传的归档。',
    'admin.img.noName': '请输入镜像名称。',
    'admin.img.uploading': '上传中：{done} / {total}',
    'admin.img.imported': '{name} 已上传（{size}，sha256 {sha}）；主机接下来导入。',
    'admin.img.list': '镜像',
    'admin.img.network': '上传失败：请检查网络后重试',
  },
});

const KIND = { ready: 'ok', building: 'info', failed: 'bad', pending: 'warn', missing: 'warn' };

// PUT the file with a bearer token; resolves to the parsed answer, rejects
// with ApiError as api.js does. XMLHttpRequest for the upload's progress.
function upload(path, file, token, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open('PUT', path);
    x.setRequestHeader('Authorization', 'Bearer ' + token);
    x.setRequestHeader('Content-Type', 'application/octet-stream');
    x.upload.onprogress = (e) => onProgress(e.loaded, e.total || file.size);
    x.onerror = () => reject(new ApiError(0, 'network', t('admin.img.network')));
    x.onload = () => {
      let data = null;
      try {
        data = x.responseText ? JSON.parse(x.responseText) : null;
      } catch (e) {
        data = null;
      }
      if (x.status >= 200 && x.status < 300) return resolve(data);
      const err = data && data.error;
      return reject(new ApiError(x.status, err ? err.code : 'http_' + x.status, err ? err.message : `the server answered ${x.status}`));
    };
    x.send(file);
  });
}

// The fields a build and an import share: the image's name, and the region
// and description it is made with.
function NameField({ f, set }) {
  return html`<${Field} label=${t('admin.img.name')} hint=${t('admin.img.nameHint')}>
    <input type="text" name="name" required maxlength="64" pattern="[a-z0-9._\\-]+" value=${f.name} onInput=${set('name')} />
  </${Field}>`;
}

function WhereFields({ f, set, regions }) {
  return html`<${Field} label=${t('admin.img.region')}>
      <select name="region" value=${f.region} onChange=${set('region')}>
        <option value="">${t('admin.img.everyRegion')}</option>
        ${regions.map((r) => html`<option key=${r.id} value=${r.id}>${r.id} · ${r.name}</option>`)}
      </select>
    </${Field}>
    <${Field} label=${t('admin.img.description')}>
      <input type="text" name="description" maxlength="200" value=${f.description} onInput=${set('description')} />
    </${Field}>`;
}

function Build({ regions, onDone }) {
  const [f, setF] = useState({ name: '', recipe: 'base', region: '', description: '' });
  const { busy, error, run } = useAction();
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const submit = (e) => {
    e.preventDefault();
    const body = { name: f.name.trim(), recipe: f.recipe };
    if (f.region) body.region = f.region;
    if (f.description.trim()) body.description = f.description.trim();
    run(async () => {
      const img = await api.post('/v1/admin/images', body);
      setF({ ...f, name: '', description: '' });
      onDone(t('admin.img.built', { name: img.name }));
    });
  };
  return html`<details class="card">
    <summary>${t('admin.img.build')}</summary>
    <form class="narrow" onSubmit=${submit}>
      <${NameField} f=${f} set=${set} />
      <${Field} label=${t('admin.img.recipe')}>
        <select name="recipe" value=${f.recipe} onChange=${set('recipe')}>
          <option value="base">${t('admin.img.recipe.base')}</option>
          <option value="jupyter">${t('admin.img.recipe.jupyter')}</option>
          <option value="pytorch">${t('admin.img.recipe.pytorch')}</option>
          <option value="venv">${t('admin.img.recipe.venv')}</option>
          <option value="desktop">${t('admin.img.recipe.desktop')}</option>
        </select>
      </${Field}>
      <${WhereFields} f=${f} set=${set} regions=${regions} />
      <${ErrorBox} error=${error} />
      <div class="buttons"><button type="submit" class="primary" disabled=${busy}>${t('admin.img.buildSubmit')}</button></div>
    </form>
  </details>`;
}

function Import({ regions, onDone }) {
  const [f, setF] = useState({ name: '', kind: 'base', region: '', description: '' });
  const [file, setFile] = useState(null);
  const [progress, setProgress] = useState(null);
  const { busy, error, setError, run } = useAction();
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const submit = (e) => {
    e.preventDefault();
    if (!file) return setError(new Error(t('admin.img.noFile')));
    const name = f.name.trim();
    if (!name) return setError(new Error(t('admin.img.noName')));
    return run(async () => {
      const tok = await api.post('/v1/tokens', { name: 'console image upload', expires_in_days: 1 }, { idempotent: false });
      try {
        const q = new URLSearchParams();
        if (f.region) q.set('region', f.region);
        q.set('kind', f.kind);
        if (f.description.trim()) q.set('description', f.description.trim());
        setProgress({ done: 0, total: file.size });
        const img = await upload(`/v1/admin/images/${encodeURIComponent(name)}/archive?${q}`, file, tok.token,
          (done, total) => setProgress({ done, total }));
        onDone(t('admin.img.imported', { name: img.name, size: fmtBytes(img.upload_bytes), sha: (img.sha256 || '').slice(0, 12) }));
      } finally {
        setProgress(null);
        await api.del(`/v1/tokens/${tok.id}`).catch(() => {});
      }
    });
  };
  return html`<details class="card">
    <summary>${t('admin.img.import')}</summary>
    <form class="narrow" onSubmit=${submit}>
      <p class="hint">${t('admin.img.importIntro')}</p>
      <${Field} label=${t('admin.img.file')}>
        <input type="file" name="archive" required onChange=${(e) => setFile(e.target.files[0] || null)} />
      </${Field}>
      <${NameField} f=${f} set=${set} />
      <${Field} label=${t('admin.img.kind')}>
        <select name="kind" value=${f.kind} onChange=${set('kind')}>
          <option value="base">${t('admin.img.kind.base')}</option>
          <option value="framework">${t('admin.img.kind.framework')}</option>
        </select>
      </${Field}>
      <${WhereFields} f=${f} set=${set} regions=${regions} />
      ${progress
        ? html`<p role="status"><progress max=${progress.total} value=${progress.done} aria-label=${t('admin.img.import')}></progress>
            ${' '}${t('admin.img.uploading', { done: fmtBytes(progress.done), total: fmtBytes(progress.total) })}</p>`
        : null}
      <${ErrorBox} error=${error} />
      <div class="buttons"><button type="submit" class="primary" disabled=${busy}>${t('admin.img.importSubmit')}</button></div>
    </form>
  </details>`;
}

// The image on each host of its region, as the hosts last reported it.
function PerHost({ image, onClose }) {
  const hosts = useLoad(() => api.get(`/v1/admin/images/${encodeURIComponent(image)}/hosts`).then((r) => r.items), [image]);
  // while a host has not reported it ready (or failed), look again every 5 s
  const waiting = (hosts.data || []).some((h) => h.state === 'missing' || h.state === 'building');
  useEffect(() => {
    if (!waiting) return undefined;
    const id = setInterval(() => hosts.reload(true), 5000);
    return () => clearInterval(id);
  }, [waiting]);
  const cols = [
    { key: 'host', label: t('admin.img.col.host'), render: (h) => html`${h.hostname} <span class="muted mono">${h.node_id}</span>` },
    { key: 'region', label: t('admin.img.col.region') },
    {
      key: 'state',
      label: t('admin.img.col.state'),
      render: (h) => html`<span data-host=${h.node_id} data-value=${h.state}><${Badge} kind=${KIND[h.state]}>${t('admin.img.state.' + h.state)}</${Badge}></span>
        ${h.message ? html`<div class="muted">${h.message}</div>` : null}`,
    },
    { key: 'size', label: t('admin.img.col.size'), class: 'num', render: (h) => (h.size_bytes ? fmtBytes(h.size_bytes) : '—') },
    { key: 'updated', label: t('admin.img.col.updated'), render: (h) => (h.updated_at ? fmtDateTime(h.updated_at) : '—') },
  ];
  return html`<${Dialog} open=${true} wide=${true} title=${t('admin.img.perHostTitle', { name: image })} onClose=${onClose}>
    <${LoadError} error=${hosts.error} />
    ${hosts.loading && !hosts.data ? html`<${Spinner} />` : null}
    ${hosts.data ? html`<${Table} columns=${cols} rows=${hosts.data} rowKey=${(h) => h.node_id} empty=${t('admin.img.noHosts')} caption=${t('admin.img.perHostTitle', { name: image })} />` : null}
  </${Dialog}>`;
}

export default function Images() {
  const images = useLoad(() => api.all('/v1/images'), []);
  const regions = useLoad(() => api.get('/v1/admin/regions').then((r) => r.items), []);
  const nodes = useLoad(() => api.all('/v1/admin/nodes'), []);
  const [notice, setNotice] = useState(null);
  const [perHost, setPerHost] = useState(null);
  const list = images.data || [];
  const busy = list.some((i) => i.state === 'pending' || i.state === 'building');
  // while a host builds or fetches one, look again every 5 s
  useEffect(() => {
    if (!busy) return undefined;
    const id = setInterval(() => images.reload(true), 5000);
    return () => clearInterval(id);
  }, [busy]);
  const done = (msg) => {
    setNotice(msg);
    images.reload(true);
  };
  const cols = [
    {
      key: 'name',
      label: t('admin.img.col.name'),
      render: (i) => html`<strong data-image=${i.name}>${i.name}</strong>${i.description ? html`<div class="muted">${i.description}</div>` : null}`,
    },
    { key: 'kind', label: t('admin.img.col.kind') },
    {
      key: 'state',
      label: t('admin.img.col.state'),
      render: (i) => html`<span data-field="state" data-value=${i.state}><${Badge} kind=${KIND[i.state]}>${t('admin.img.state.' + i.state)}</${Badge}></span>
        ${i.message ? html`<div class="muted">${i.message}</div>` : null}`,
    },
    {
      key: 'nodes',
      label: t('admin.img.col.nodes'),
      class: 'num',
      render: (i) => html`${fmtNumber(i.nodes)} <button type="button" class="small" data-per-host=${i.name} onClick=${() => setPerHost(i.name)}>${t('admin.img.perHost')}</button>`,
    },
    { key: 'content', label: t('admin.img.col.content'), render: (i) => [i.os, i.python, i.cuda, i.framework].map((x) => x || '—').join(' / ') },
    { key: 'size', label: t('admin.img.col.size'), class: 'num', render: (i) => (i.size_bytes ? fmtBytes(i.size_bytes) : '—') },
    { key: 'created', label: t('admin.img.col.created'), render: (i) => fmtDateTime(i.created_at) },
  ];
  const regionList = regions.data || [];
  return html`<${Page} title=${t('admin.img.title')}>
    <${LoadError} error=${images.error || regions.error || nodes.error} />
    ${nodes.data ? html`<p class="muted">${t('admin.img.hosts', { n: fmtNumber(nodes.data.length) })}</p>` : null}
    ${notice ? html`<p class="notice" role="status">${notice}</p>` : null}
    ${images.loading && !images.data ? html`<${Spinner} />` : null}
    ${images.data ? html`<${Table} columns=${cols} rows=${list} rowKey=${(i) => i.name} empty=${t('admin.img.empty')} caption=${t('admin.img.list')} />` : null}
    ${regions.data
      ? html`<${Build} regions=${regionList} onDone=${done} />
        <${Import} regions=${regionList} onDone=${done} />`
      : null}
    ${perHost ? html`<${PerHost} image=${perHost} onClose=${() => setPerHost(null)} />` : null}
  </${Page}>`;
}
