// Shared building blocks of the console's pages.
import { html, useState, useEffect, useRef } from './ui.js';
import { t, addMessages } from './i18n.js';

addMessages({
  en: {
    'c.close': 'Close',
    'c.cancel': 'Cancel',
    'c.confirm': 'Confirm',
    'c.copy': 'Copy',
    'c.copied': 'Copied',
    'c.copy_failed': 'Copy failed: select the text and copy it by hand',
    'c.loading': 'Loading…',
    'c.empty': 'Nothing here yet.',
    'c.type_to_confirm': 'Type {word} to confirm',
    'c.error': 'Error',
    'c.actions': 'Actions',
  },
  zh: {
    'c.close': '关闭',
    'c.cancel': '取消',
    'c.confirm': '确认',
    'c.copy': '复制',
    'c.copied': '已复制',
    'c.copy_failed': '复制失败：请选中文字手动复制',
    'c.loading': '加载中…',
    'c.empty': '暂无内容。',
    'c.type_to_confirm': '输入 {word} 以确认',
    'c.error': '错误',
    'c.actions': '操作',
  },
});

export function Page({ title, actions, children }) {
  useEffect(() => {
    document.title = title ? `${title} · suanli` : 'suanli';
  }, [title]);
  return html`<section class="page">
    <header class="page-head">
      <h1 tabindex="-1" id="page-title">${title}</h1>
      ${actions ? html`<div class="actions">${actions}</div>` : null}
    </header>
    ${children}
  </section>`;
}

// The API's message as is: it names the way out.
export function ErrorBox({ error }) {
  if (!error) return null;
  const msg = typeof error === 'string' ? error : error.message || String(error);
  return html`<div class="error" role="alert">${msg}${error.code && error.code !== 'network' ? html` <span class="code">(${error.code})</span>` : null}</div>`;
}

// A modal on the native <dialog>: focus stays inside, Esc closes it.
let dialogSeq = 0;
export function Dialog({ open, title, onClose, children, wide }) {
  const ref = useRef(null);
  const id = useRef('dlg-' + ++dialogSeq).current;
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (open && !d.open) {
      if (d.showModal) d.showModal();
      else d.setAttribute('open', '');
    } else if (!open && d.open) {
      d.close();
    }
  }, [open]);
  const onCancel = (e) => {
    e.preventDefault();
    if (onClose) onClose();
  };
  return html`<dialog ref=${ref} class=${wide ? 'wide' : ''} aria-labelledby=${id} onCancel=${onCancel}>
    ${open
      ? html`<div class="dialog-head">
            <h2 id=${id}>${title}</h2>
            <button type="button" class="icon" aria-label=${t('c.close')} onClick=${onClose}>×</button>
          </div>
          <div class="dialog-body">${children}</div>`
      : null}
  </dialog>`;
}

// A confirmation; with `word`, the user must type it (release, delete).
export function Confirm({ open, title, message, word, confirmLabel, danger, onConfirm, onClose, error, busy }) {
  const [typed, setTyped] = useState('');
  useEffect(() => setTyped(''), [open]);
  const ok = !word || typed.trim() === word;
  const submit = (e) => {
    e.preventDefault();
    if (ok && !busy) onConfirm();
  };
  return html`<${Dialog} open=${open} title=${title} onClose=${onClose}>
    <form onSubmit=${submit}>
      ${message ? html`<p>${message}</p>` : null}
      ${word
        ? html`<${Field} label=${t('c.type_to_confirm', { word })}>
            <input type="text" autocomplete="off" spellcheck="false" value=${typed} onInput=${(e) => setTyped(e.target.value)} />
          <//>`
        : null}
      <${ErrorBox} error=${error} />
      <div class="buttons">
        <button type="button" onClick=${onClose}>${t('c.cancel')}</button>
        <button type="submit" class=${danger ? 'danger' : 'primary'} disabled=${!ok || busy}>${confirmLabel || t('c.confirm')}</button>
      </div>
    </form>
  <//>`;
}

export async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch (e) {
    /* fall through to the old way */
  }
  const ta = document.createElement('textarea');
  ta.value = text;
  ta.setAttribute('readonly', '');
  ta.style.position = 'fixed';
  ta.style.opacity = '0';
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch (e) {
    ok = false;
  }
  ta.remove();
  return ok;
}

// The visible text is the button's name (no aria-label that could differ
// from it); "Copied" is also said in a live region beside it.
export function CopyButton({ text, label, class: cls, id }) {
  const [state, setState] = useState('');
  const onClick = async () => {
    const ok = await copyText(text);
    setState(ok ? 'ok' : 'fail');
    setTimeout(() => setState(''), 1500);
  };
  const name = label || t('c.copy');
  return html`<span class="copy-wrap"><button type="button" id=${id} class=${'copy ' + (cls || '')} data-copy=${text} onClick=${onClick}>${state === 'ok' ? t('c.copied') : name}</button><span class="sr-only" aria-live="polite">${state === 'ok' ? t('c.copied') : state === 'fail' ? t('c.copy_failed') : ''}</span></span>`;
}

// columns: [{key, label, render?(row), class?}]
// rows undefined: still loading (a spinner), unless error is set (the
// caller shows it: nothing here).
export function Table({ columns, rows, empty, caption, rowKey, error }) {
  if (!rows) return error ? null : html`<${Spinner} />`;
  if (!rows.length) return html`<p class="empty">${empty || t('c.empty')}</p>`;
  return html`<div class="table-wrap"><table>
    ${caption ? html`<caption class="sr-only">${caption}</caption>` : null}
    <thead><tr>${columns.map((c) => html`<th scope="col" class=${c.class}>${c.label || html`<span class="sr-only">${t('c.actions')}</span>`}</th>`)}</tr></thead>
    <tbody>
      ${rows.map(
        (r, i) => html`<tr key=${rowKey ? rowKey(r) : r.id || i}>
          ${columns.map((c) => html`<td class=${c.class} data-label=${c.label}>${c.render ? c.render(r) : r[c.key]}</td>`)}
        </tr>`,
      )}
    </tbody>
  </table></div>`;
}

// A labelled control: the <label> wraps the control, so it is its name.
export function Field({ label, children, hint }) {
  return html`<label class="field">
    <span class="label">${label}</span>
    ${children}
    ${hint ? html`<span class="hint">${hint}</span>` : null}
  </label>`;
}

export function Spinner() {
  return html`<p class="spinner" role="status">${t('c.loading')}</p>`;
}

// kind: ok | warn | bad | info | muted
export function Badge({ kind, children }) {
  return html`<span class=${'badge ' + (kind || 'muted')}>${children}</span>`;
}

// useLoad(fn, deps): runs fn() (a promise) and keeps {data, error, loading,
// reload, setData}. A newer run wins over an older one still in flight.
export function useLoad(fn, deps = []) {
  const [st, setSt] = useState({ data: undefined, error: null, loading: true });
  const seq = useRef(0);
  const run = () => {
    const n = ++seq.current;
    setSt((s) => ({ ...s, loading: true }));
    return Promise.resolve()
      .then(fn)
      .then(
        (data) => n === seq.current && setSt({ data, error: null, loading: false }),
        (error) => n === seq.current && setSt((s) => ({ data: s.data, error, loading: false })),
      );
  };
  useEffect(() => {
    run();
  }, deps);
  return { ...st, reload: run, setData: (d) => setSt((s) => ({ ...s, data: typeof d === 'function' ? d(s.data) : d })) };
}
