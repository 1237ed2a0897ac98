// Which card fits, in the console's market (tests/integration/test_t701_console_estimate.py):
// the "Will it fit?" form asks POST /v1/estimate and keeps the hosts whose
// free GPUs hold the model, with the GPUs it needs there; a size that is not
// one shows the API's message; "Show all hosts" brings the others back.
//   SUANLI_EMAIL, SUANLI_PASSWORD
import { run } from './lib.mjs';

const env = process.env;

// The node ids of the host tables' rows, and their "GPUs needed" cells.
const hostRows = (page) =>
  page.$$eval('section.region table', (tables) =>
    tables
      .filter((t) => t.querySelector('caption') && /Hosts/.test(t.querySelector('caption').textContent))
      .flatMap((t) => [...t.querySelectorAll('tbody tr')])
      .map((tr) => ({
        node: (tr.querySelector('td .mono') || {}).textContent || '',
        need: (tr.querySelector('td.fit-need') || {}).textContent || null,
      })),
  );

async function check(s, model, precision, job) {
  const page = s.page;
  await page.$eval('form.fit input[name=fit_model]', (i) => (i.value = ''));
  await page.type('form.fit input[name=fit_model]', model);
  await page.select('form.fit select[name=fit_precision]', precision);
  await page.select('form.fit select[name=fit_job]', job);
  await page.click('form.fit button[type=submit]');
}

await run('t701-estimate', {}, async (s) => {
  const page = s.page;
  const R = s.results;
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await s.visit('/market', { label: 'market', waitFor: 'form.fit' });
  R.hosts_before = await hostRows(page);

  await check(s, '30B', 'bf16', 'inference');
  await page.waitForSelector('form.fit .fit-summary', { timeout: 30000 });
  R.summary = await page.$eval('form.fit .fit-summary', (p) => p.textContent.trim());
  R.hosts_30b = await hostRows(page);
  await page.click('form.fit details summary');
  R.parts = await page.$$eval('form.fit details tbody tr', (trs) => trs.map((tr) => tr.querySelector('td').textContent.trim()));
  await s.axe('market-fit');
  await s.screenshot('market-fit');

  await check(s, '7B', 'int4', 'lora');
  await page.waitForFunction(() => /7B int4/.test((document.querySelector('form.fit .fit-summary') || {}).textContent || ''), { timeout: 30000 });
  R.hosts_7b = await hostRows(page);

  await check(s, '7GB', 'bf16', 'inference');
  await page.waitForSelector('form.fit .error', { timeout: 30000 });
  R.error = await page.$eval('form.fit .error', (e) => e.textContent.trim());
  R.hosts_after_error = await hostRows(page);
  await s.screenshot('market-fit-error');
});
