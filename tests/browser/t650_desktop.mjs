// t650: the desktop in the browser (issue 14, item 3), in Debian's
// chromium. The owner logs in, opens the instance's page, follows its
// Desktop link (noVNC's vnc.html on the desktop's service port, with the
// port's access token): noVNC connects through the node's proxy and the
// canvas shows the Xfce desktop — many colours, not one. Another renter,
// logged in to the console in a browser of their own, is refused: the
// page without the token (401), their own session planted on the service's
// host (403), and noVNC's websocket never opens for them.
// Environment (lib.mjs): SUANLI_URL, SUANLI_EMAIL, SUANLI_PASSWORD (the
// owner), SUANLI_OTHER_EMAIL (another renter, same password),
// SUANLI_INSTANCE (the owner's running desktop instance).
import { start, sleep, BASE } from './lib.mjs';

const s = await start('t650-desktop');
const R = s.results;
const id = process.env.SUANLI_INSTANCE;
const page = s.page;

// Opens a websocket from the page: 'open', 'refused' or 'timeout'.
function tryWebSocket(url) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, ['binary']);
    const t = setTimeout(() => resolve('timeout'), 15000);
    ws.onopen = () => {
      clearTimeout(t);
      ws.close();
      resolve('open');
    };
    ws.onclose = () => {
      clearTimeout(t);
      resolve('refused');
    };
  });
}

// Distinct colours and the share of non-black pixels on a grid over noVNC's
// canvas (a blank or black screen has one colour).
function canvasFigures() {
  const c = document.querySelector('#noVNC_container canvas');
  if (!c || !c.width || !c.height) return null;
  const ctx = c.getContext('2d');
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  const colours = new Set();
  let lit = 0;
  let n = 0;
  for (let y = 0; y < c.height; y += 4) {
    for (let x = 0; x < c.width; x += 4) {
      const i = (y * c.width + x) * 4;
      colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      if (d[i] + d[i + 1] + d[i + 2] > 30) lit++;
      n++;
    }
  }
  return { width: c.width, height: c.height, colours: colours.size, lit: lit / n };
}

try {
  await s.login(process.env.SUANLI_EMAIL, process.env.SUANLI_PASSWORD);
  await s.visit(`/instances/${id}`, { label: 'instance', waitFor: '#desktop-link' });
  const link = await page.$eval('#desktop-link', (a) => a.href);
  const u = new URL(link);
  R.host = u.host;
  R.has_token = u.searchParams.has('suanli_token');
  s.allowOrigin(`http://${u.host}`);
  s.allowOrigin(`ws://${u.host}`);
  // what the desktop's host answered other than 2xx/3xx, and what is still
  // pending: the reason when noVNC does not start
  const bad = [];
  const pending = new Set();
  page.on('request', (r) => r.url().includes(u.host) && pending.add(r.url()));
  page.on('requestfinished', (r) => pending.delete(r.url()));
  page.on('requestfailed', (r) => pending.delete(r.url()) && bad.push(`failed ${r.url()} ${(r.failure() || {}).errorText}`));
  page.on('response', (r) => r.url().includes(u.host) && r.status() >= 400 && bad.push(`${r.status()} ${r.url()}`));
  // noVNC is some forty ES modules, each a request websockify answers
  // within the instance's CPU quota (a quarter of a core here): generous
  // timeouts for a loaded machine. This machine's other tests add and
  // remove network interfaces, which Chromium reports as a network change
  // and aborts requests in flight: a module lost so leaves noVNC loading
  // for ever, a websocket lost so disconnected (noVNC says so in its
  // status). Such a load is tried again, five times at most, as lib.mjs's
  // goto does; the last status and answers are the failure's message.
  const noVNCState = () => {
    const c = document.documentElement.classList;
    if (c.contains('noVNC_connected')) return 'connected';
    const st = document.getElementById('noVNC_status');
    if (!c.contains('noVNC_loading') && !c.contains('noVNC_connecting') && st && st.classList.contains('noVNC_status_error')) return 'failed';
    return null;
  };
  const t0 = Date.now();
  for (let attempt = 0; ; attempt++) {
    const before = bad.length;
    // the same link again is only a jump to its fragment: leave it first
    if (attempt) await s.goto('about:blank', page, 'load');
    await s.goto(link, page, 'load');
    const lostNow = () => bad.slice(before).some((b) => /ERR_NETWORK_CHANGED/.test(b));
    let state = 'timeout';
    for (const end = Date.now() + 300000; Date.now() < end; await sleep(500)) {
      const now = await page.evaluate(noVNCState).catch(() => null);
      if (now) {
        state = now;
        break;
      }
      if (lostNow()) {
        state = 'lost';
        break;
      }
    }
    if (state === 'connected') break;
    if (state === 'timeout' || attempt >= 4) {
      const status = await page.$eval('#noVNC_status', (e) => e.textContent).catch(() => '?');
      const loading = await page.evaluate(() => document.documentElement.classList.contains('noVNC_loading'));
      throw new Error(`noVNC did not connect: status ${JSON.stringify(status)}, still loading its modules: ${loading}; answers: ${bad.join(', ')}; pending: ${[...pending].join(', ')}`);
    }
    R.retried = (R.retried || 0) + 1;
    await sleep(1000);
  }
  R.connected = true;
  R.connect_ms = Date.now() - t0;
  // Xfce draws its desktop and panel: wait for a screen of many colours
  let fig = null;
  const deadline = Date.now() + 180000;
  while (Date.now() < deadline) {
    fig = await page.evaluate(canvasFigures);
    if (fig && fig.colours >= 16 && fig.lit > 0.5) break;
    await sleep(1000);
  }
  R.canvas = fig;
  R.drawn_ms = Date.now() - t0;
  await s.screenshot('desktop');

  // another renter, in a browser of their own
  const ctx = await s.browser.createBrowserContext();
  const other = await ctx.newPage();
  s.watch(other);
  await s.login(process.env.SUANLI_OTHER_EMAIL, process.env.SUANLI_PASSWORD, other);
  const bare = `http://${u.host}${u.pathname}`;
  R.stranger_no_token = (await s.goto(bare, other, 'load')).status();
  // their session, as a cookie of the service's host (what a console and
  // services sharing a parent domain would send)
  const session = (await other.cookies(BASE)).find((c) => c.name === 'suanli_session');
  R.stranger_has_session = !!session;
  await other.setCookie({ name: 'suanli_session', value: session ? session.value : 'x', domain: u.hostname, path: '/' });
  R.stranger_session = (await s.goto(bare, other, 'load')).status();
  // noVNC's websocket from that page, with that cookie: never opens
  R.stranger_websocket = await other.evaluate(tryWebSocket, `ws://${u.host}/websockify`);
  await s.screenshot('stranger', other);
  await ctx.close();

  // the owner's own browser, holding the desktop's cookie, on a page of a
  // sibling service (what another renter's public service would be): its
  // websocket to the desktop is refused (cross-site websocket hijacking)
  const sibling = `http://${u.hostname.replace(/-\d+\./, '-6006.')}:${u.port}/`;
  s.allowOrigin(sibling);
  await s.goto(sibling, page, 'load');
  R.sibling_websocket = await page.evaluate(tryWebSocket, `ws://${u.host}/websockify`);
  // and from the desktop's own origin it opens (the control)
  await s.goto(`http://${u.host}/vnc.html`, page, 'load');
  R.own_websocket = await page.evaluate(tryWebSocket, `ws://${u.host}/websockify`);
} catch (e) {
  s.fail(String((e && e.stack) || e));
  try {
    await s.screenshot('error');
  } catch (x) {
    /* the page may be gone */
  }
}
await s.finish();
