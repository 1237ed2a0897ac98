// The renter's File storage page (tests/integration/test_t662_console_storage.py):
// the menu leads there, the table shows each region's storage with its use,
// quota, free size, price and cost per day, and the page says how it is billed.
//   SUANLI_EMAIL, SUANLI_PASSWORD
import { run } from './lib.mjs';

const env = process.env;

await run('t662-storage', {}, async (s) => {
  const page = s.page;
  const R = s.results;
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await s.visit('/instances', { label: 'instances', axe: false });
  R.nav = await page.$$eval('nav a', (as) => as.map((a) => a.getAttribute('href')));
  await s.visit('/storage', { label: 'storage', waitFor: 'main table tbody tr' });
  R.headers = await page.$$eval('main table thead th', (ths) => ths.map((th) => th.textContent.trim()));
  R.rows = await page.$$eval('main table tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent.trim())));
  R.note = await page.$eval('#storage-billing', (p) => p.textContent.trim()).catch(() => null);
  await s.screenshot('storage');
});
