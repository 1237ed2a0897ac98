// The console's budgets, measured in chromium against the real suanlid
// (tests/integration/test_t511_console_budget.py):
//  - first load: the JS and CSS bytes (as sent: gzip) a cold browser fetches
//    to show the login page, and to show the instance list once logged in;
//  - the instance list with 500 instances: the time to render the table
//    (instances.js's renderTable, the code the page runs) and lay it out,
//    with performance.now() around it, for instances cloned from the real
//    GET /v1/instances answer.
import { run, sleep } from './lib.mjs';

const env = process.env;

async function assetBytes(page) {
  return page.evaluate(() => {
    const out = { js: 0, css: 0, files: [] };
    for (const e of performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'))) {
      const u = new URL(e.name);
      const kind = /\.js$/.test(u.pathname) ? 'js' : /\.css$/.test(u.pathname) ? 'css' : null;
      if (!kind) continue;
      // encodedBodySize: the body as it came over the wire (gzip)
      out[kind] += e.encodedBodySize;
      out.files.push(`${u.pathname} ${e.encodedBodySize}/${e.decodedBodySize}`);
    }
    return out;
  });
}

await run('t511-budget', {}, async (s) => {
  const page = s.page;
  const R = s.results;
  const cdp = await page.createCDPSession();
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });

  // cold load of the login page
  await s.visit('/login', { label: 'login', waitFor: '#login-form' });
  R.login = await assetBytes(page);

  // log in; then a cold load of the instance list
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await page.goto('about:blank');
  await s.visit('/instances', { label: 'instances', waitFor: '#instance-table' });
  R.instances = await assetBytes(page);
  // the real instance's name is markup: shown as text, never run
  R.xss = await page.evaluate(() => {
    const t = document.querySelector('#instance-table');
    return {
      text_shown: t.textContent.includes('<img src=x onerror="window.__pwned=1">'),
      img_in_table: !!t.querySelector('img'),
      pwned: !!window.__pwned,
    };
  });

  // 500 instances through the page's own table code
  const timing = await page.evaluate(async (n) => {
    const url = performance.getEntriesByType('resource').map((e) => e.name).find((u) => /\/assets\/instances-[^/]*\.js$/.test(u));
    if (!url) return { error: 'the instances chunk was not loaded' };
    const mod = await import(url);
    const real = (await (await fetch('/v1/instances', { credentials: 'same-origin' })).json()).items;
    if (!real.length) return { error: 'no instance to clone' };
    const states = ['running', 'stopped', 'running', 'creating', 'stopping', 'failed'];
    const items = [];
    for (let i = 0; i < n; i++) {
      const x = JSON.parse(JSON.stringify(real[i % real.length]));
      x.id = 'i-' + String(i).padStart(12, 'a');
      x.name = 'bench-' + i;
      x.state = states[i % states.length];
      x.mode = i % 7 === 0 ? 'nogpu' : 'gpu';
      x.release_at = x.state === 'stopped' ? new Date(Date.now() + (i + 1) * 3600e3).toISOString() : null;
      items.push(x);
    }
    const runs = [];
    const renderOnly = [];
    for (let r = 0; r < 5; r++) {
      const el = document.createElement('div');
      document.querySelector('main').appendChild(el);
      await new Promise((res) => requestAnimationFrame(() => res()));
      const fresh = items.map((x) => ({ ...x })); // new objects: nothing cached from the last run
      const t0 = performance.now();
      mod.renderTable(el, fresh);
      const tr = performance.now();
      el.offsetHeight; // style and layout inside the measurement
      const t1 = performance.now();
      runs.push(t1 - t0);
      renderOnly.push(tr - t0);
      const rows = el.querySelectorAll('[role=rowgroup] + [role=rowgroup] > [role=row]').length;
      if (rows !== n) return { error: `rendered ${rows} rows, not ${n}` };
      if (el.querySelector('img') || window.__pwned) return { error: 'a name ran as markup' };
      mod.renderTable(el, []); // unmount: the next run starts cold
      el.remove();
    }
    const sorted = runs.slice().sort((a, b) => a - b);
    return { runs, render_only: renderOnly, median: sorted[Math.floor(sorted.length / 2)], first: runs[0], max: sorted[sorted.length - 1] };
  }, 500);
  R.render500 = timing;
  await sleep(100);
});
