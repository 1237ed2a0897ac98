// The renter's day in the console, against the real suanlid and agent
// (tests/integration/test_t510_console_renter.py starts them and asserts on
// the JSON this prints). Environment, besides lib.mjs's:
//   SUANLI_EMAIL, SUANLI_PASSWORD  the renter to register
//   SUANLI_ID_NUMBER               a valid resident ID for the verification
//   SUANLI_ADMIN_TOKEN             the operator's token: approves the
//                                  verification, credits, runs billing
//   SUANLI_CREDIT_MICROS           how much to credit
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, readdirSync, readFileSync, chmodSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run, BASE, sleep } from './lib.mjs';

const env = process.env;
const admin = async (method, path, body) => {
  const r = await fetch(BASE + path, {
    method,
    headers: { Authorization: 'Bearer ' + env.SUANLI_ADMIN_TOKEN, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
};

// The SSH command as the console shows it, run with the copied password
// (ssh asks SSH_ASKPASS for it: no key, no sshpass).
function sshWith(command, password, remote) {
  const words = command.trim().split(/\s+/);
  if (words[0] !== 'ssh') throw new Error('not an ssh command: ' + command);
  const dir = mkdtempSync(join(tmpdir(), 'suanli-askpass-'));
  const askpass = join(dir, 'askpass');
  writeFileSync(askpass, '#!/bin/sh\nprintf "%s\\n" "$SUANLI_SSH_PASSWORD"\n');
  chmodSync(askpass, 0o700);
  try {
    return execFileSync(
      'ssh',
      ['-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR', '-o', 'ConnectTimeout=10',
        '-o', 'PubkeyAuthentication=no', '-o', 'PreferredAuthentications=password,keyboard-interactive', '-o', 'NumberOfPasswordPrompts=1',
        ...words.slice(1), remote],
      { env: { ...env, SSH_ASKPASS: askpass, SSH_ASKPASS_REQUIRE: 'force', DISPLAY: ':0', SUANLI_SSH_PASSWORD: password }, stdio: ['ignore', 'pipe', 'pipe'], timeout: 30000 },
    ).toString();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const badge = (page) => page.$eval('main .page p .badge', (b) => b.textContent.trim()).catch(() => '');
// Waits until the instance page's state badge reads state (or 'failed':
// then returns the host's message, which the page shows).
async function waitState(s, state, timeout = 90000) {
  const h = await s.page.waitForFunction((st) => {
    const b = document.querySelector('main .page p .badge');
    const t = b && b.textContent.trim();
    return (t === st || t === 'failed') && t;
  }, { timeout, polling: 100 }, state);
  const got = await h.jsonValue();
  if (got === state) return null;
  return await s.page.$eval('main .warnbox', (e) => e.textContent).catch(() => 'failed');
}

// This machine's other tests add and flush iptables chains while CNI sets
// up an instance's port mapping: a start may fail with iptables' "No
// chain/target/match". Such a start is tried once more (as a renter would,
// with the same button) and recorded; any other failure fails the test.
async function startOnce(s, button, R, what) {
  await s.clickText(button);
  let failed = await waitState(s, 'running', 120000);
  if (failed && /iptables|CNI/.test(failed)) {
    (R.start_retries = R.start_retries || []).push(`${what}: ${failed}`);
    await s.clickText(button);
    failed = await waitState(s, 'running', 120000);
  }
  if (failed) throw new Error(`${what} failed: ${failed}`);
}

await run('t510-renter', {}, async (s) => {
  const page = s.page;
  const R = s.results;

  // --- register: a real form that password managers understand
  await s.visit('/register', { label: 'register', waitFor: '#register-form' });
  R.register_form = await page.$$eval('#register-form input', (ins) => ins.map((i) => `${i.name}:${i.type}:${i.autocomplete}`));
  await page.type('#register-form input[name=email]', env.SUANLI_EMAIL);
  await page.type('#register-form input[name=name]', 'Browser Renter');
  await page.type('#register-form input[name=password]', env.SUANLI_PASSWORD);
  await page.type('#register-form input[name=password2]', env.SUANLI_PASSWORD);
  await page.click('#register-form button[type=submit]');
  await page.waitForFunction(() => location.pathname === '/account', { timeout: 20000 });
  await s.settle();
  await s.axe('account');
  await s.screenshot('account-new');

  // --- real-name verification through the console, approved by the operator
  await page.type('#verification-form input[name=real_name]', 'Browser Renter');
  await page.type('#verification-form input[name=id_number]', env.SUANLI_ID_NUMBER);
  await page.click('#verification-form button[type=submit]');
  await s.waitText('pending review');
  const me = await page.evaluate(() => fetch('/v1/me', { credentials: 'same-origin' }).then((r) => r.json()));
  R.user_id = me.id;
  R.verification_after_submit = me.verification;
  await s.screenshot('verification-pending');
  await admin('POST', `/v1/admin/users/${me.id}/verification`, { approve: true });
  await s.visit('/account', { label: 'account-verified' });
  R.verification_badge = await page.$eval('#ver-h .badge', (b) => b.textContent.trim());

  // --- credit: the balance in the header changes without a reload (stream)
  await s.visit('/instances', { label: 'instances-empty' });
  R.balance_before = await page.$eval('header .balance', (b) => b.textContent.trim());
  await admin('POST', `/v1/admin/users/${me.id}/credit`, { amount_micros: Number(env.SUANLI_CREDIT_MICROS), memo: 'console test' });
  await page.waitForFunction((b) => document.querySelector('header .balance').textContent.trim() !== b, { timeout: 30000 }, R.balance_before);
  R.balance_after = await page.$eval('header .balance', (b) => b.textContent.trim());

  // --- the market, and create from a host's offer
  await s.visit('/market', { label: 'market', waitFor: 'main table' });
  R.market_hosts = await page.$$eval('section.region', (secs) => secs.map((x) => x.querySelectorAll('.table-wrap')[0].querySelectorAll('tbody tr').length));
  const createBtn = await page.waitForSelector('section.region tbody button.primary:not([disabled])');
  await createBtn.click();
  await page.waitForSelector('#create-form');
  await page.waitForFunction(() => /hour/.test(document.querySelector('#create-price').textContent), { timeout: 20000 });
  R.create_price = await page.$eval('#create-price', (e) => e.textContent.replace(/\s+/g, ' ').trim());
  R.create_host_preset = await page.$eval('#create-form select[name=host]', (e) => e.value);
  await s.axe('create-dialog');
  await s.screenshot('create-dialog');
  const name = 'web-' + Date.now().toString(36);
  await page.type('#create-form input[name=name]', name);
  await page.click('#create-form button[type=submit]');
  await page.waitForFunction(() => /^\/instances\/i-/.test(location.pathname), { timeout: 30000 });
  const iid = await page.evaluate(() => location.pathname.split('/')[2]);
  R.instance_id = iid;
  R.instance_name = name;
  // running arrives through the stream: no reload here
  const failed = await waitState(s, 'running', 120000);
  if (failed) throw new Error('create failed: ' + failed);
  await s.settle();
  await s.axe('instance-running');
  await s.screenshot('instance-running');

  // --- copy the SSH command and the password, and log in with them
  await page.click('#copy-ssh-command');
  await sleep(200);
  R.copied_command = await page.evaluate(() => navigator.clipboard.readText());
  R.shown_command = await page.$eval('#ssh-command', (e) => e.textContent.trim());
  await page.click('#copy-ssh-password');
  await sleep(200);
  const password = await page.evaluate(() => navigator.clipboard.readText());
  R.password_copied = password.length > 0 && password !== R.copied_command;
  R.password_hidden = await page.$eval('#ssh-password', (e) => e.textContent.trim());
  R.ssh_hostname = sshWith(R.copied_command, password, 'hostname').trim();

  // --- TensorBoard's link: a page served from inside the instance
  const marker = 'hello-from-' + iid;
  sshWith(R.copied_command, password,
    `mkdir -p /tmp/tb && echo ${marker} > /tmp/tb/index.html; setsid nohup python3 -m http.server 6006 --directory /tmp/tb >/dev/null 2>&1 </dev/null &`);
  const link = await page.waitForSelector('a.service-link[data-port="6006"]');
  const href = await link.evaluate((a) => a.href);
  R.tensorboard_link = href;
  s.allowOrigin(href);
  const tb = await s.newPage();
  let seen = '';
  for (let i = 0; i < 60 && !seen.includes(marker); i++) {
    await tb.goto(href, { waitUntil: 'load' }).catch(() => {});
    seen = await tb.evaluate(() => document.body.innerText).catch(() => '');
    if (!seen.includes(marker)) await sleep(500);
  }
  R.tensorboard_page = seen.trim();
  R.tensorboard_url = tb.url();
  await s.screenshot('tensorboard', tb);
  await tb.close();

  // --- the terminal button: loads its chunk (term's); where the host serves
  // no terminals (its agent in a chroot) there is no button, and a note
  // points to SSH
  if (await page.$('[data-no-terminal]')) R.terminal = 'not_served';
  else {
    await s.clickText('Terminal');
    await page.waitForFunction(() => document.querySelector('.xterm, .warnbox[role=status], [data-terminal]'), { timeout: 30000 });
    R.terminal = await page.evaluate(() => (document.querySelector('.xterm, [data-terminal]') ? 'loaded' : 'unavailable'));
    await s.screenshot('terminal');
    await s.clickText(R.terminal === 'loaded' ? 'Close terminal' : 'Terminal').catch(() => {});
  }

  // --- stop, then start without GPUs (states arrive live)
  await s.clickText('Stop');
  await waitState(s, 'stopped', 120000);
  R.after_stop = await badge(page);
  await s.screenshot('stopped');
  await startOnce(s, 'Start without GPUs', R, 'start without GPUs');
  R.mode_after_start = await page.$eval('main .page p .badge + .muted', (e) => e.textContent.trim());
  await s.screenshot('running-nogpu');

  // --- the list: state, mode, one-click copy
  await s.visit('/instances', { label: 'instances', waitFor: '#instance-table' });
  R.list_row = await page.$eval(`#instance-table [role=row][data-id="${iid}"]`, (tr) => tr.innerText.replace(/\s+/g, ' ').trim());
  await page.click(`#instance-table [role=row][data-id="${iid}"] button[data-copy]`);
  await sleep(200);
  R.list_copied = await page.evaluate(() => navigator.clipboard.readText());

  // --- keyboard: Tab reaches every control of the list and of the instance
  R.keyboard_unreached = await s.unreachableByKeyboard();
  await s.visit('/instances/' + iid, { label: 'instance-keyboard', axe: false });
  R.keyboard_unreached.push(...(await s.unreachableByKeyboard()));
  await s.visit('/instances', { label: 'instances-again', axe: false, waitFor: '#instance-table' });

  // --- phone width: nothing wider than the screen
  await page.setViewport({ width: 375, height: 800 });
  await s.settle();
  R.narrow_overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await s.axe('instances-375');
  await s.screenshot('instances-375');
  await page.setViewport({ width: 1280, height: 900 });

  // --- the bill: settle now, the chart has today's bar
  await admin('POST', '/v1/admin/billing/run', {});
  const today = new Date().toISOString().slice(0, 10);
  await s.visit('/billing', { label: 'billing', waitFor: '#bill-chart' });
  await page.waitForSelector(`#bill-chart rect[data-day="${today}"]`, { timeout: 30000 });
  R.bill_day = today;
  R.bill_today_micros = await page.$eval(`#bill-chart rect[data-day="${today}"]`, (r) => Number(r.dataset.amount));
  R.bill_total = await page.$eval('#bill-total', (e) => e.textContent.trim());
  R.covers = await page.$eval('#covers', (e) => e.textContent.trim());
  const dl = mkdtempSync(join(tmpdir(), 'suanli-dl-'));
  const cdp = await page.createCDPSession();
  await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: dl });
  await s.clickText('Download the bill (CSV)');
  for (let i = 0; i < 50 && !readdirSync(dl).some((f) => f.endsWith('.csv')); i++) await sleep(100);
  const csv = readdirSync(dl).find((f) => f.endsWith('.csv'));
  R.bill_csv = csv ? readFileSync(join(dl, csv), 'utf8') : '';
  rmSync(dl, { recursive: true, force: true });

  // --- events, and the language switch
  await s.visit('/events', { label: 'events', waitFor: 'main table' });
  R.event_kinds = await page.$$eval('main tbody tr td:nth-child(3) code', (c) => c.map((x) => x.textContent));
  // the stream (not the polling fallback) feeds the pages
  await page.waitForFunction(() => document.querySelector('main .page-head .badge'), { timeout: 15000 }).catch(() => {});
  R.stream_badge = await page.$eval('main .page-head .badge', (b) => b.textContent.trim()).catch(() => '');
  await page.select('header .locale select', 'zh');
  await page.waitForFunction(() => document.documentElement.lang === 'zh-CN');
  R.zh_nav = await page.$$eval('nav a', (a) => a.map((x) => x.textContent.trim()));
  await s.axe('events-zh');
  await s.screenshot('events-zh');
  await page.select('header .locale select', 'en');

  // --- release, with the typed confirmation
  await s.visit('/instances/' + iid, { label: 'instance-before-release' });
  await s.clickText('Release');
  await page.waitForSelector('dialog[open] form input[type=text]');
  R.release_disabled_before_typing = await page.$eval('dialog[open] button[type=submit]', (b) => b.disabled);
  await s.axe('release-dialog');
  await page.type('dialog[open] form input[type=text]', name);
  await page.click('dialog[open] button[type=submit]');
  await waitState(s, 'released', 120000);
  R.after_release = await badge(page);
  await s.screenshot('released');

  // --- log out: back at the login page, the API refuses the old cookie
  await s.clickText('Log out', { scope: 'header' });
  await page.waitForFunction(() => location.pathname === '/login', { timeout: 20000 });
  R.me_after_logout = await page.evaluate(() => fetch('/v1/me', { credentials: 'same-origin' }).then((r) => r.status));
  R.requests = s.requests.length;
});
