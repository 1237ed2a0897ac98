// An instance's charts and hints in the console (tests/integration/test_t729_console_charts.py):
// the instance page loads the charts chunk (uPlot), draws CPU and memory
// from GET /v1/instances/ID/metrics, says why the GPU series are absent
// (simulated GPUs), switches the window, and shows the instance's hints.
//   SUANLI_EMAIL, SUANLI_PASSWORD, SUANLI_INSTANCE
import { run } from './lib.mjs';

const env = process.env;

await run('t729-charts', {}, async (s) => {
  const page = s.page;
  const R = s.results;
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await s.visit('/instances/' + env.SUANLI_INSTANCE, { label: 'instance', waitFor: 'section[data-charts] figure canvas' });
  await page.waitForFunction(() => document.querySelectorAll('section[data-charts] figure canvas').length >= 2, { timeout: 30000 });
  R.charts = await page.$$eval('section[data-charts] figure', (fs) => fs.map((f) => f.getAttribute('data-chart')));
  R.absent = await page.$$eval('section[data-charts] [data-absent]', (ps) => ps.map((p) => p.textContent));
  // a drawn chart is not blank: its canvas has pixels of more than one colour
  R.colours = await page.$eval('section[data-charts] figure[data-chart="charts.cpu"] canvas', (c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    for (let i = 0; i < d.length; i += 4 * 7) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2] | (d[i + 3] << 24));
    return seen.size;
  });
  R.hints = await page.$$eval('[data-hint]', (ps) => ps.map((p) => ({ kind: p.getAttribute('data-hint'), text: p.textContent })));
  await s.screenshot('instance-charts');
  // another window asks the API again with that window
  const asked = page.waitForRequest((r) => /\/metrics\?from=\d+&to=\d+&step=\d+/.test(r.url()) && (() => {
    const u = new URL(r.url());
    return Number(u.searchParams.get('to')) - Number(u.searchParams.get('from')) === 86400;
  })(), { timeout: 30000 });
  await page.$$eval('section[data-charts] [role=group] button', (bs) => bs.find((b) => b.textContent.trim() === '1d').click());
  await asked;
  R.window_1d = true;
  await s.axe('instance-charts');
});
