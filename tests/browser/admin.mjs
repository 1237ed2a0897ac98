// The operator's pages in real chromium (tests/integration/test_t540_console_admin.py
// runs it once per phase and checks each change through the API between
// phases). Environment, besides lib.mjs's:
//   ADMIN_PHASE   fleet | revoke-cordon | drain | uncordon | renter | images | zh | remove | revenue
//   NODE_ID, RENTER_ID, RENTER_EMAIL, RENTER2_ID, JOIN_ID, ARCHIVE, IMAGE_NAME, DAY (as the phase needs)
import { run, sleep } from './lib.mjs';

const env = process.env;
const phase = env.ADMIN_PHASE;
const nodeRow = (id) => `tr:has([data-node="${id}"])`;

// Clicks the selector once it exists and is enabled.
async function click(s, selector) {
  const h = await s.page.waitForSelector(selector + ':not([disabled])', { visible: true, timeout: 30000 });
  await h.click();
}

// Goes to path inside the app, as a user does (the navigation's link, or
// the history API where the menu is folded away), then checks the page as
// lib.mjs's visit() does: axe and a picture. One page load per browser, so
// one event stream.
async function go(s, path, { label, waitFor } = {}) {
  const before = await s.page.$eval('#page-title', (e) => e.textContent).catch(() => null);
  const link = await s.page.$(`nav a[href="${path}"]`);
  if (link && (await link.isVisible())) await link.click();
  else await s.page.evaluate((p) => { history.pushState(null, '', p); dispatchEvent(new PopStateEvent('popstate')); }, path);
  await s.page.waitForFunction((p) => location.pathname === p, { timeout: 10000 }, path);
  // the new page's heading replaced the old one's (a renter gets none)
  await s.page.waitForFunction((b) => {
    const h = document.querySelector('#page-title');
    return h ? h.textContent !== b : !document.querySelector('.spinner');
  }, { timeout: 30000 }, before);
  await s.settle(s.page, waitFor);
  await s.axe(label || path);
  await s.screenshot(label || path);
}

async function waitGone(s, selector) {
  await s.page.waitForFunction((sel) => !document.querySelector(sel), { timeout: 30000 }, selector);
}

async function fleet(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  // the host with its GPUs and simulated flag
  await go(s, '/admin/hosts', { label: 'hosts', waitFor: nodeRow(env.NODE_ID) });
  s.results.host = await s.page.$eval(nodeRow(env.NODE_ID), (tr) => ({
    text: tr.innerText,
    state: tr.querySelector('[data-field=state]').dataset.value,
    gpus: tr.querySelector('[data-field=gpus]').textContent.trim(),
    simulated: !!tr.querySelector('[data-field=simulated]'),
    cordoned: !!tr.querySelector('[data-field=cordon]'),
  }));
  // its details (GPUs one by one) in a dialog, checked by axe too
  await click(s, `${nodeRow(env.NODE_ID)} button[data-action=details]`);
  await s.page.waitForSelector('dialog[open] [data-testid=host-details]');
  s.results.details = await s.page.$eval('dialog[open] [data-testid=host-details]', (d) => d.innerText);
  await s.axe('host details');
  await s.screenshot('host details');
  await s.page.keyboard.press('Escape');
  await waitGone(s, 'dialog[open]');

  // the verification queue: approve the renter's request
  await go(s, '/admin/verifications', { label: 'verifications', waitFor: `[data-user="${env.RENTER_ID}"]` });
  s.results.injected = { shown: 0 };
  s.results.injected.shown += await s.page.$eval('main', (m) => (m.innerText.includes('<img src="/x-injected"') ? 1 : 0));
  await click(s, `tr:has([data-user="${env.RENTER_ID}"]) button[data-action=approve]`);
  await s.waitText(`${env.RENTER_EMAIL} is verified.`);
  await s.screenshot('approved');
  // and reject the other one's, with the reason the renter will read
  await click(s, `tr:has([data-user="${env.RENTER2_ID}"]) button[data-action=reject]`);
  await s.page.waitForSelector('dialog[open] textarea[name=reason]');
  await s.page.type('dialog[open] textarea[name=reason]', 'the name does not match the ID number');
  await s.axe('reject dialog');
  await s.screenshot('reject dialog');
  await click(s, 'dialog[open] button[type=submit]');
  await waitGone(s, `[data-user="${env.RENTER2_ID}"]`);

  // credit the renter 123.45 with a memo
  await go(s, '/admin/users', { label: 'users', waitFor: `[data-user="${env.RENTER_ID}"]` });
  s.results.injected.shown += await s.page.$eval('main', (m) => (m.innerText.includes('<img src="/x-injected"') ? 1 : 0));
  await click(s, `tr:has([data-user="${env.RENTER_ID}"]) button[data-action=credit]`);
  await s.page.waitForSelector('dialog[open] input[name=amount]');
  await s.page.type('dialog[open] input[name=amount]', '123.45');
  await s.page.type('dialog[open] input[name=memo]', 'console test credit');
  await s.axe('credit dialog');
  await s.screenshot('credit dialog');
  // the first answer is lost on its way back (the server did credit): the
  // retry carries the same Idempotency-Key, so it gets the stored answer
  const cdp = await s.page.createCDPSession();
  await cdp.send('Fetch.enable', { patterns: [{ urlPattern: '*/credit', requestStage: 'Response' }] });
  let dropped = 0;
  cdp.on('Fetch.requestPaused', async (e) => {
    if (dropped++ === 0) await cdp.send('Fetch.failRequest', { requestId: e.requestId, errorReason: 'ConnectionReset' });
    else await cdp.send('Fetch.continueRequest', { requestId: e.requestId });
  });
  const keys = [];
  s.page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/credit')) keys.push(r.headers()['idempotency-key'] || null);
  });
  await click(s, 'dialog[open] button[type=submit]');
  await s.page.waitForSelector('[data-testid=credit-notice]');
  await cdp.send('Fetch.disable');
  s.results.creditKeys = keys;
  // the injected reset is this test's doing, not the page's
  s.failures = s.failures.filter((f) => !(f.includes('ERR_CONNECTION_RESET') && f.includes('/credit')));
  s.results.creditNotice = await s.page.$eval('[data-testid=credit-notice]', (e) => e.textContent);
  s.results.balanceShown = await s.page.$eval(`tr:has([data-user="${env.RENTER_ID}"]) [data-field=balance]`, (e) => e.textContent);

  s.results.injected.requests = s.requests.filter((u) => u.includes('x-injected'));
  s.results.injected.images = await s.page.$$eval('img', (i) => i.length);

  // a new price for the RTX 4090 (default) and for no-GPU mode in sample-1
  await go(s, '/admin/gpu-models', { label: 'gpu-models' });
  await click(s, 'main tr:has([data-model]) button[aria-label="Set price: RTX 4090"]');
  await s.page.waitForSelector('dialog[open] input[name=price]');
  await s.page.$eval('dialog[open] input[name=price]', (e) => { e.select(); });
  await s.page.keyboard.press('Backspace');
  await s.page.type('dialog[open] input[name=price]', '2.5');
  await s.axe('price dialog');
  await click(s, 'dialog[open] button[type=submit]');
  await waitGone(s, 'dialog[open]');
  await s.waitText('RTX 4090: CN¥2.50 per GPU-hour from now on');
  const other = 'main section section details.card';
  await s.page.click(`${other} summary`);
  await s.page.select(`${other} select[name=item]`, 'nogpu');
  await s.page.select(`${other} select[name=region]`, 'sample-1');
  await s.page.type(`${other} input[name=amount]`, '0.2');
  await s.axe('other price form');
  await click(s, `${other} button[type=submit]`);
  await s.waitText('from now on (sample-1)');
  s.results.priceNotice = await s.page.$eval('main .notice', (e) => e.textContent);
  await s.screenshot('prices set');

  // an API error is shown as its message: a GPU model that exists already
  await s.page.click('main > section > details.card summary');
  await s.page.type('main details.card input[name=name]', 'RTX 4090');
  await s.page.type('main details.card input[name=vram_mib]', '24564');
  await s.page.type('main details.card input[name=cpu_cores_per_gpu]', '16');
  await s.page.type('main details.card input[name=memory_mib_per_gpu]', '65536');
  await s.page.type('main details.card input[name=price]', '1.98');
  await click(s, 'main details.card button[type=submit]');
  await s.page.waitForSelector('main details.card .error');
  s.results.apiError = await s.page.$eval('main details.card .error', (e) => e.textContent);
  await s.screenshot('gpu model error');

  // a join token for two hosts: its secret shown once
  await go(s, '/admin/join-tokens', { label: 'join-tokens' });
  await s.page.$eval('main input[name=max_uses]', (e) => { e.value = ''; });
  await s.page.type('main input[name=max_uses]', '2');
  await click(s, 'main form button[type=submit].primary');
  await s.page.waitForSelector('[data-testid=join-secret] [data-field=token]');
  s.results.joinToken = await s.page.$eval('[data-testid=join-secret]', (e) => ({
    token: e.querySelector('[data-field=token]').textContent,
    id: e.querySelector('.muted code').textContent,
  }));
  await s.page.waitForSelector(`[data-token="${s.results.joinToken.id}"]`);
  await s.axe('join token created');
  await s.screenshot('join token created');

  // the pages not visited yet: axe and a picture each
  for (const p of ['prices', 'images', 'usage']) {
    await go(s, '/admin/' + p, { label: p });
    if (p === 'prices') s.results.prices = await s.page.$eval('main table', (e) => e.innerText);
  }
  s.results.usage = await s.page.$eval('[data-testid=usage-now]', (e) => e.innerText);
}

async function revokeCordon(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await go(s, '/admin/join-tokens', { label: 'join-tokens before revoke', waitFor: `[data-token="${env.JOIN_ID}"]` });
  await click(s, `tr:has([data-token="${env.JOIN_ID}"]) button[data-action=revoke]`);
  await s.page.waitForSelector('dialog[open] button[type=submit]');
  await s.axe('revoke dialog');
  await click(s, 'dialog[open] button[type=submit]');
  await waitGone(s, `[data-token="${env.JOIN_ID}"]`);
  await s.screenshot('revoked');

  await go(s, '/admin/hosts', { label: 'hosts before cordon', waitFor: nodeRow(env.NODE_ID) });
  await click(s, `${nodeRow(env.NODE_ID)} button[data-action=cordon]`);
  await s.page.waitForSelector('dialog[open] input[name=reason]');
  await s.page.type('dialog[open] input[name=reason]', 'maintenance from the console');
  await s.axe('cordon dialog');
  await s.screenshot('cordon dialog');
  await click(s, 'dialog[open] button[type=submit]');
  await s.page.waitForSelector(`${nodeRow(env.NODE_ID)} [data-field=cordon][data-value=cordoned]`);
  await s.screenshot('cordoned');
}

async function drain(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await go(s, '/admin/hosts', { label: 'hosts before drain', waitFor: nodeRow(env.NODE_ID) });
  await click(s, `${nodeRow(env.NODE_ID)} button[data-action=drain]`);
  await s.page.waitForSelector('dialog[open] input[name=migrate]');
  await s.page.click('dialog[open] input[name=migrate]');
  await s.axe('drain dialog');
  await click(s, 'dialog[open] button[type=submit]');
  await s.page.waitForSelector('[data-testid=drain-result]');
  s.results.drainResult = await s.page.$eval('[data-testid=drain-result]', (e) => e.innerText);
  await s.page.waitForSelector(`${nodeRow(env.NODE_ID)} [data-field=cordon][data-value=draining]`);
  await s.axe('drained');
  await s.screenshot('drained');
}

// Uncordon with the keyboard only, at phone width.
async function uncordon(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await go(s, '/admin/hosts', { label: 'hosts at phone width', waitFor: nodeRow(env.NODE_ID) });
  s.results.overflow = await s.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  const target = `${nodeRow(env.NODE_ID)} button[data-action=uncordon]`;
  await s.page.waitForSelector(target);
  let tabs = 0;
  for (; tabs < 100; tabs++) {
    if (await s.page.$eval(target, (b) => document.activeElement === b)) break;
    await s.page.keyboard.press('Tab');
  }
  s.results.tabs = tabs;
  await s.page.keyboard.press('Enter');
  await waitGone(s, `${nodeRow(env.NODE_ID)} [data-field=cordon]`);
  await s.screenshot('uncordoned at phone width');
  // every page fits the phone's width
  s.results.overflows = {};
  for (const p of ['join-tokens', 'verifications', 'users', 'gpu-models', 'prices', 'images', 'usage']) {
    await go(s, '/admin/' + p, { label: p + ' at phone width' });
    s.results.overflows[p] = await s.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  }
}

// An archive imported from the browser: uploaded with a short-lived API
// token the page makes and deletes (the cookie may only send JSON).
async function images(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await go(s, '/admin/images', { label: 'images' });
  await s.page.click('main details.card:nth-of-type(2) summary');
  const form = 'main details.card:nth-of-type(2) form';
  const input = await s.page.waitForSelector(`${form} input[type=file]`);
  await input.uploadFile(env.ARCHIVE);
  await s.page.type(`${form} input[name=name]`, env.IMAGE_NAME);
  await s.page.type(`${form} input[name=description]`, 'uploaded by t540');
  await s.axe('import form');
  await click(s, `${form} button[type=submit]`);
  await s.page.waitForFunction((n) => [...document.querySelectorAll('main .notice')].some((e) => e.textContent.includes(n + ' uploaded')),
    { timeout: 60000 }, env.IMAGE_NAME);
  await s.page.waitForSelector(`[data-image="${env.IMAGE_NAME}"]`);
  s.results.notice = await s.page.$eval('main .notice', (e) => e.textContent);
  await s.screenshot('imported');
  // its state on each host: the one host fetches it and reports it ready
  await click(s, `[data-per-host="${env.IMAGE_NAME}"]`);
  await s.page.waitForFunction((n) => document.querySelector(`[data-host="${n}"]`)?.dataset.value === 'ready',
    { timeout: 60000, polling: 500 }, env.NODE_ID).catch(() => {});
  s.results.perHost = await s.page.$eval(`[data-host="${env.NODE_ID}"]`, (e) => e.dataset.value);
  await s.axe('per host dialog');
  await s.screenshot('per-host');
}

// The pages in Chinese, chosen with the language switch.
async function zh(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  s.results.browserLang = await s.page.evaluate(() => navigator.languages.join(','));
  await s.page.select('header .locale select', 'zh');
  await go(s, '/admin/hosts', { label: 'hosts zh', waitFor: nodeRow(env.NODE_ID) });
  s.results.title = await s.page.$eval('#page-title', (e) => e.textContent);
  s.results.state = await s.page.$eval(`${nodeRow(env.NODE_ID)} [data-field=state]`, (e) => e.textContent.trim());
  s.results.lang = await s.page.evaluate(() => document.documentElement.lang);
  await go(s, '/admin/usage', { label: 'usage zh' });
  s.results.usageTitle = await s.page.$eval('#page-title', (e) => e.textContent);
}

// The usage page's revenue of DAY (today, UTC) from GET /v1/admin/bills:
// the table's row, the chart's bar and the month's total; then another
// month picked in the month picker.
async function revenue(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await go(s, '/admin/usage', { label: 'usage revenue', waitFor: `table span[data-day="${env.DAY}"]` });
  s.results.today = await s.page.$eval(`table span[data-day="${env.DAY}"]`, (e) => ({
    amount: Number(e.dataset.amount),
    text: e.textContent,
    row: e.closest('tr').innerText,
  }));
  s.results.bar = await s.page.$eval(`#bill-chart rect[data-day="${env.DAY}"]`, (e) => Number(e.dataset.amount));
  s.results.month = await s.page.$eval('[data-testid=usage-month]', (e) => ({
    month: e.dataset.month,
    total: Number(e.dataset.total),
    text: e.innerText,
  }));
  s.results.readings = await s.page.evaluate(() => Object.keys(localStorage).filter((k) => k.startsWith('suanli.admin')));
  // another month: its (empty) bill replaces this one's
  await s.page.$eval('input[name=month]', (e) => {
    e.value = '2020-01';
    e.dispatchEvent(new Event('change', { bubbles: true }));
  });
  await s.page.waitForSelector('[data-testid=usage-month][data-month="2020-01"]', { timeout: 30000 });
  s.results.other = await s.page.$eval('[data-testid=usage-month]', (e) => ({
    total: Number(e.dataset.total),
    rows: document.querySelectorAll('table span[data-day]').length,
  }));
  await s.axe('usage another month');
  await s.screenshot('usage another month');
}

// Remove the host: it leaves the list.
async function remove(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await go(s, '/admin/hosts', { label: 'hosts before remove', waitFor: nodeRow(env.NODE_ID) });
  await click(s, `${nodeRow(env.NODE_ID)} button[data-action=remove]`);
  await s.page.waitForSelector('dialog[open] button[type=submit]');
  await s.axe('remove dialog');
  await s.screenshot('remove dialog');
  await click(s, 'dialog[open] button[type=submit]');
  await waitGone(s, nodeRow(env.NODE_ID));
  s.results.text = await s.page.$eval('main', (e) => e.innerText);
  await s.screenshot('removed');
}

// A renter opening the fleet's page sees none of it, and nothing breaks.
async function renter(s) {
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await go(s, '/admin/hosts', { label: 'renter on admin hosts' });
  await sleep(500);
  s.results.text = await s.page.evaluate(() => document.querySelector('main').innerText);
  s.results.adminRequests = s.requests.filter((u) => u.includes('/v1/admin/'));
  s.results.rows = await s.page.$$eval('[data-node]', (r) => r.length);
}

const phases = { fleet, 'revoke-cordon': revokeCordon, drain, uncordon, renter, images, zh, remove, revenue };
const opts = phase === 'uncordon' ? { width: 390, height: 844 } : phase === 'zh' ? { lang: 'zh-CN' } : {};
await run(`t540-admin-${phase}`, opts, async (s) => {
  if (!phases[phase]) throw new Error(`ADMIN_PHASE must be one of ${Object.keys(phases).join(', ')}`);
  await phases[phase](s);
});
