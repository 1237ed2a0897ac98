// Live updates without the stream (tests/integration/test_t512_console_fallback.py):
// the browser's requests for /v1/events/stream fail, as behind a proxy that
// buffers or drops them; the console must fall back to polling the JSON
// routes and still show a credit in the header and a state change in the
// list without a reload.
//   SUANLI_EMAIL, SUANLI_PASSWORD, SUANLI_ADMIN_TOKEN, SUANLI_USER_ID
import { run, BASE } from './lib.mjs';

const env = process.env;
const admin = async (method, path, body) => {
  const r = await fetch(BASE + path, {
    method,
    headers: { Authorization: 'Bearer ' + env.SUANLI_ADMIN_TOKEN, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.json();
};

await run('t512-fallback', {}, async (s) => {
  const page = s.page;
  const R = s.results;
  let refused = 0;
  await page.setRequestInterception(true);
  page.on('request', (r) => {
    if (r.url().startsWith(BASE + '/v1/events/stream')) {
      refused++;
      r.abort('connectionrefused');
    } else r.continue();
  });
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await s.visit('/events', { label: 'events-polling' });
  await page.waitForFunction(() => {
    const b = document.querySelector('main .page-head .badge');
    return b && /10 s/.test(b.textContent);
  }, { timeout: 20000 });
  R.badge = await page.$eval('main .page-head .badge', (b) => b.textContent.trim());
  const before = await page.$eval('header .balance', (b) => b.textContent.trim());
  const t0 = Date.now();
  await admin('POST', `/v1/admin/users/${env.SUANLI_USER_ID}/credit`, { amount_micros: 7_000_000, memo: 'fallback test' });
  await page.waitForFunction((b) => document.querySelector('header .balance').textContent.trim() !== b, { timeout: 30000 }, before);
  R.balance_seconds = (Date.now() - t0) / 1000;
  R.balance_after = await page.$eval('header .balance', (b) => b.textContent.trim());
  await s.screenshot('after-credit');
  R.stream_requests_refused = refused;
  // the refused stream requests are this test's doing, not the page's
  s.failures = s.failures.filter((f) => !f.includes('/v1/events/stream'));
});
