// The terminal in the browser (docs/design/access.md, "Terminal"): a root
// shell in the instance, inside tmux, so a closed tab or a dropped network
// loses nothing. Its own chunk (xterm.js), loaded by the instance page.
//
// Each connection asks suanlid for a ticket (POST
// /v1/instances/{id}/terminal: single-use, a minute, bound to this page's
// origin) and opens the websocket it names on the instance's service host.
// Keystrokes go as binary frames, the size as a text frame
// {"type":"resize","cols":C,"rows":R}; the output comes as binary frames.
import { Terminal as XTerm } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import xtermCss from '@xterm/xterm/css/xterm.css' with { type: 'text' };
import { html, useEffect, useRef, useState } from '../lib/ui.js';
import { api } from '../lib/api.js';
import { addMessages, t } from '../lib/i18n.js';

addMessages({
  en: {
    'term.label': 'Terminal of {id}',
    'term.connecting': 'Connecting…',
    'term.open': 'Connected: a tmux session named "console". Closing the tab keeps it; reconnecting shows the same screen.',
    'term.ended': 'The shell ended. Reconnect for a new one.',
    'term.dropped': 'The connection dropped: reconnecting…',
    'term.failed': 'The terminal could not connect: the instance may have stopped, or the network is down. Reconnect to try again.',
    'term.reconnect': 'Reconnect',
  },
  zh: {
    'term.label': '{id} 的终端',
    'term.connecting': '正在连接…',
    'term.open': '已连接：tmux 会话 "console"。关闭页面不会丢失会话，重新连接会看到同一屏幕。',
    'term.ended': 'Shell 已退出。重新连接可开启新的 Shell。',
    'term.dropped': '连接已断开：正在重新连接…',
    'term.failed': '终端无法连接：实例可能已停止，或网络中断。请点击重新连接。',
    'term.reconnect': '重新连接',
  },
});

// xterm.js's own stylesheet, once per page (styles may be inline: the CSP
// allows 'unsafe-inline' for styles only).
function addStyle() {
  if (document.getElementById('xterm-css')) return;
  const s = document.createElement('style');
  s.id = 'xterm-css';
  s.textContent = xtermCss;
  document.head.appendChild(s);
}

const RETRIES = [1000, 2000, 5000]; // after a dropped connection, then the button

// The shell starts at the size the page sends first, so the page sends it
// only once the box is laid out (tmux would shrink its window to a passing
// size and push the top of the screen into its history).
async function fitted(cur) {
  for (let i = 0; i < 120; i++) {
    const d = cur.fit.proposeDimensions();
    if (d && d.cols >= 10 && d.rows >= 3) {
      cur.fit.fit();
      return;
    }
    await new Promise((r) => requestAnimationFrame(r));
  }
}

export default function Terminal({ instance }) {
  const box = useRef(null);
  const [status, setStatus] = useState({ kind: 'connecting' });
  const [generation, setGeneration] = useState(0); // a new value reconnects
  const term = useRef(null);

  // the terminal itself lives as long as the component
  useEffect(() => {
    addStyle();
    const x = new XTerm({
      cursorBlink: true,
      fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Noto Sans Mono CJK SC", monospace',
      fontSize: 14,
      scrollback: 5000,
      // WCAG AA for every colour pair a program picks (tmux's status line is
      // dark grey on green in xterm's palette: 3.6:1)
      minimumContrastRatio: 4.5,
    });
    const fit = new FitAddon();
    x.loadAddon(fit);
    x.open(box.current);
    term.current = { x, fit, ws: null };
    try {
      fit.fit();
    } catch (e) {
      /* not laid out yet: the observer fits it */
    }
    const ro = new ResizeObserver(() => {
      try {
        fit.fit();
      } catch (e) {
        /* hidden */
      }
    });
    ro.observe(box.current);
    x.focus();
    return () => {
      ro.disconnect();
      const ws = term.current && term.current.ws;
      if (ws) ws.close(1000);
      term.current = null;
      x.dispose();
    };
  }, []);

  // one websocket per generation; a dropped one is retried a few times
  useEffect(() => {
    let live = true;
    let retry = 0;
    let timer = null;
    const enc = new TextEncoder();
    const subs = [];

    async function connect() {
      const cur = term.current;
      if (!cur || !live) return;
      setStatus({ kind: 'connecting' });
      await fitted(cur);
      if (!live || !term.current) return;
      let ticket;
      try {
        ticket = await api.post(`/v1/instances/${encodeURIComponent(instance.id)}/terminal`, {});
      } catch (e) {
        if (live) setStatus({ kind: 'error', message: e.message });
        return;
      }
      if (!live || !term.current) return;
      const ws = new WebSocket(ticket.url);
      ws.binaryType = 'arraybuffer';
      cur.ws = ws;
      let opened = false;
      const sendSize = () => {
        if (ws.readyState === WebSocket.OPEN && cur.x.cols >= 10 && cur.x.rows >= 3) {
          ws.send(JSON.stringify({ type: 'resize', cols: cur.x.cols, rows: cur.x.rows }));
        }
      };
      ws.onopen = () => {
        opened = true;
        retry = 0;
        if (live) setStatus({ kind: 'open' });
        sendSize();
      };
      ws.onmessage = (ev) => {
        if (typeof ev.data !== 'string') cur.x.write(new Uint8Array(ev.data));
      };
      ws.onclose = (ev) => {
        while (subs.length) subs.pop().dispose();
        if (!live) return;
        if (opened && ev.code === 1000) {
          setStatus({ kind: 'ended' });
        } else if (opened && retry < RETRIES.length) {
          // the network dropped: tmux kept the session, come back to it
          setStatus({ kind: 'dropped' });
          timer = setTimeout(connect, RETRIES[retry++]);
        } else {
          setStatus({ kind: 'failed' });
        }
      };
      subs.push(cur.x.onData((d) => ws.readyState === WebSocket.OPEN && ws.send(enc.encode(d))));
      subs.push(cur.x.onBinary((d) => {
        if (ws.readyState !== WebSocket.OPEN) return;
        const b = new Uint8Array(d.length);
        for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 0xff;
        ws.send(b);
      }));
      subs.push(cur.x.onResize(sendSize));
    }
    connect();
    return () => {
      live = false;
      clearTimeout(timer);
      while (subs.length) subs.pop().dispose();
      const cur = term.current;
      if (cur && cur.ws) {
        cur.ws.close(1000);
        cur.ws = null;
      }
    };
  }, [instance.id, generation]);

  const reconnect = () => {
    setGeneration(generation + 1);
    if (term.current) term.current.x.focus();
  };
  const k = status.kind;
  const text = k === 'error' ? status.message : t('term.' + k);
  return html`<div class="terminal">
    <p role="status" class=${k === 'error' || k === 'failed' ? 'warnbox' : 'muted'}>
      ${text}
      ${k === 'ended' || k === 'failed' || k === 'error'
        ? html` <button type="button" onClick=${reconnect}>${t('term.reconnect')}</button>`
        : null}
    </p>
    <div
      ref=${box}
      role="group"
      aria-label=${t('term.label', { id: instance.id })}
      style="height: 60vh; min-height: 16rem; background: #000; padding: 4px; border-radius: 4px"
    ></div>
  </div>`;
}
