// The browser tests' shared helper: Debian's chromium, headless, driven by
// puppeteer-core from console/node_modules (no browser download). A test
// module (tests/integration/test_t5*.py) starts the real suanlid and agent,
// then runs a script here with:
//   SUANLI_URL         the server, e.g. http://127.0.0.1:PORT
//   SUANLI_EMAIL, SUANLI_PASSWORD   whom to log in as (when the script does)
//   SUANLI_ARTIFACTS   where screenshots go (default $SUANLI_BUILD/artifacts,
//                      else build/artifacts)
//   CHROMIUM           the browser (default /usr/bin/chromium)
// and asserts on the one JSON object the script prints last:
//   {"ok": bool, "failures": [...], "results": {...}, "screenshots": [...]}
//
//   import { start } from './lib.mjs';
//   const s = await start('t540-admin');
//   await s.login(process.env.SUANLI_EMAIL, process.env.SUANLI_PASSWORD);
//   await s.visit('/admin/hosts');          // load, wait, axe, screenshot
//   s.results.hosts = await s.page.$$eval('tbody tr', (r) => r.length);
//   await s.finish();                       // prints the JSON, closes chromium
//
// Recorded as failures (and so failing the test): any console error or
// uncaught exception on the page, any request that leaves the server's
// origin (except origins a flow allows with s.allowOrigin(), such as an
// instance's own service host it opens), and every axe-core violation of
// impact serious or critical on each page visit() or axe() checks.
import { createRequire } from 'node:module';
import { readFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const require = createRequire(join(root, 'console', 'package.json'));
const puppeteer = require('puppeteer-core');
const axeSource = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

export const BASE = (process.env.SUANLI_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
export const ORIGIN = new URL(BASE).origin;

function artifactsDir() {
  if (process.env.SUANLI_ARTIFACTS) return process.env.SUANLI_ARTIFACTS;
  const build = process.env.SUANLI_BUILD || join(root, 'build');
  return join(build, 'artifacts');
}

const BAD_CODES = new Set(['not_found', 'method_not_allowed', 'unknown_field', 'invalid_json', 'json_required', 'origin_not_allowed', 'internal', 'invalid_parameter']);

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Session {
  constructor(name, browser, context, page, opts) {
    this.name = name;
    this.browser = browser;
    this.context = context;
    this.page = page;
    this.opts = opts;
    this.failures = [];
    this.results = {};
    this.screenshots = [];
    this.requests = [];
    this.allowed = new Set([ORIGIN]);
    this.shot = 0;
    this.dir = join(artifactsDir(), name);
    rmSync(this.dir, { recursive: true, force: true }); // this run's pictures only
    mkdirSync(this.dir, { recursive: true });
    this.watch(page);
  }

  fail(what) {
    this.failures.push(what);
    if (!this.opts.quiet) console.error('FAIL: ' + what);
  }

  allowOrigin(origin) {
    this.allowed.add(new URL(origin).origin);
  }

  watch(page) {
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      const loc = m.location() || {};
      const text = m.text();
      // Chromium logs every API answer >= 400 as "Failed to load resource";
      // those are judged by the response handler below (the console shows
      // the API's message: a 401 before login or a 409 is no page error).
      if (/^Failed to load resource: the server responded with a status of/.test(text) && loc.url && loc.url.startsWith(ORIGIN + '/v1/')) return;
      // this machine's other tests add and remove network interfaces, which
      // Chromium reports as a network change and aborts requests in flight
      // (the console retries a GET once): counted, not failed
      if (/ERR_NETWORK_CHANGED/.test(text)) {
        this.results.network_changed = (this.results.network_changed || 0) + 1;
        return;
      }
      // only the console's pages are judged: a page of an instance's
      // service (a flow opens one) is the renter's own server's
      if (!page.url().startsWith(ORIGIN + '/')) return;
      this.fail(`console error on ${page.url()}: ${text} ${loc.url ? '(' + loc.url + ')' : ''}`);
    });
    page.on('response', async (r) => {
      const u = r.url();
      if (!u.startsWith(ORIGIN + '/v1/') || r.status() < 400) return;
      let code = '';
      try {
        code = (await r.json()).error.code;
      } catch (e) {
        /* no JSON body */
      }
      const path = u.slice(ORIGIN.length);
      (this.results.api_errors = this.results.api_errors || []).push(`${r.request().method()} ${path.split('?')[0]} ${r.status()} ${code}`);
      // answers the console must never provoke: a server fault, a route or
      // field it invented, a request that breaks the cookie rules
      if (r.status() >= 500 || BAD_CODES.has(code)) this.fail(`API answered ${r.status()} ${code} to ${r.request().method()} ${path}`);
    });
    page.on('pageerror', (e) => this.fail(`uncaught exception on ${page.url()}: ${e.message}`));
    page.on('request', (r) => {
      const u = r.url();
      if (u.startsWith('data:') || u.startsWith('blob:') || u.startsWith('about:')) return;
      let origin;
      try {
        origin = new URL(u).origin;
      } catch (e) {
        return;
      }
      this.requests.push(u);
      if (!this.allowed.has(origin)) this.fail(`request left the origin: ${r.method()} ${u}`);
      // each API route the console called, for the test to check against
      // docs/api/openapi.yaml (the console calls documented routes only)
      if (u.startsWith(ORIGIN + '/v1/')) {
        const call = `${r.method()} ${new URL(u).pathname}`;
        const calls = (this.results.api_calls = this.results.api_calls || []);
        if (!calls.includes(call)) calls.push(call);
      }
    });
    page.on('requestfailed', (r) => {
      const f = r.failure();
      if (f && /ERR_NETWORK_CHANGED/.test(f.errorText)) return;
      // a navigation that replaced a pending fetch, or an EventSource closed
      // on purpose, is not a failure of the page
      if (f && /ERR_ABORTED/.test(f.errorText)) return;
      this.fail(`request failed: ${r.method()} ${r.url()}: ${f ? f.errorText : '?'}`);
    });
  }

  async newPage() {
    const p = await this.context.newPage();
    this.watch(p);
    return p;
  }

  // Loads path, waits for the app to settle, checks it and saves a picture.
  async visit(path, { label, waitFor, axe = true, page = this.page } = {}) {
    await this.goto(BASE + path, page);
    await this.settle(page, waitFor);
    if (axe) await this.axe(label || path, page);
    await this.screenshot(label || path, page);
  }

  // page.goto, again after ERR_NETWORK_CHANGED (see watch()).
  async goto(url, page = this.page, waitUntil = 'networkidle2') {
    for (let i = 0; ; i++) {
      try {
        return await page.goto(url, { waitUntil });
      } catch (e) {
        if (i >= 4 || !/ERR_NETWORK_CHANGED/.test(String(e))) throw e;
        this.results.network_changed = (this.results.network_changed || 0) + 1;
        await sleep(300);
      }
    }
  }

  // Waits for the page's loading indicators to go (and for a selector).
  async settle(page = this.page, waitFor) {
    if (waitFor) await page.waitForSelector(waitFor, { timeout: 30000 });
    await page.waitForFunction(() => !document.querySelector('.spinner') && document.querySelector('#app main'), { timeout: 30000 }).catch(() => {
      this.fail(`page ${page.url()} still loading after 30 s`);
    });
  }

  async screenshot(label, page = this.page) {
    const file = join(this.dir, `${String(++this.shot).padStart(2, '0')}-${label.replace(/[^A-Za-z0-9_-]+/g, '_').replace(/^_+|_+$/g, '') || 'page'}.png`);
    await page.screenshot({ path: file, fullPage: true });
    this.screenshots.push(file);
    return file;
  }

  // axe-core on the page as it is now: serious and critical violations fail.
  async axe(label, page = this.page) {
    // Runtime.evaluate is not subject to the page's CSP (script-src 'self')
    await page.evaluate(axeSource);
    const res = await page.evaluate(async () => {
      const r = await window.axe.run(document, { resultTypes: ['violations'] });
      return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) }));
    });
    const bad = res.filter((v) => v.impact === 'serious' || v.impact === 'critical');
    for (const v of bad) this.fail(`axe ${v.impact} on ${label}: ${v.id} (${v.help}) at ${v.nodes.join(', ')}`);
    (this.results.axe = this.results.axe || {})[label] = res.map((v) => `${v.impact}:${v.id}`);
    return res;
  }

  async login(email, password, page = this.page) {
    await this.goto(BASE + '/login', page);
    await page.waitForSelector('#login-form input[type=email]');
    await page.type('#login-form input[type=email]', email);
    await page.type('#login-form input[type=password]', password);
    for (let i = 0; ; i++) {
      await page.click('#login-form button[type=submit]');
      // left the login page, or an error shown (a login is not retried by
      // the console: its answer holds a secret and is never replayed)
      await page.waitForFunction(() => location.pathname !== '/login' || document.querySelector('#login-form [role=alert]'), { timeout: 20000 });
      const err = await page.$eval('#login-form [role=alert]', (e) => e.textContent).catch(() => null);
      if (!err) break;
      if (i >= 2 || !/cannot reach the server/.test(err)) throw new Error('login failed: ' + err);
      this.results.network_changed = (this.results.network_changed || 0) + 1;
    }
    await this.settle(page);
  }

  // Clicks the button (or link) whose visible text is text, within scope.
  async clickText(text, { scope = 'main', tag = 'button', page = this.page } = {}) {
    const handle = await page.waitForFunction(
      (scope, tag, text) => [...document.querySelectorAll(`${scope} ${tag}`)].find((b) => b.textContent.trim() === text && !b.disabled),
      { timeout: 30000 },
      scope,
      tag,
      text,
    );
    await handle.asElement().click();
  }

  // Waits until the page's text includes text.
  async waitText(text, { timeout = 60000, page = this.page } = {}) {
    await page.waitForFunction((t) => document.body.innerText.includes(t), { timeout }, text);
  }

  // Tabs through the page from the top; returns the visible controls that
  // Tab never reached (described by tag and text), [] when all were.
  async unreachableByKeyboard(page = this.page) {
    const all = await page.evaluate(() => {
      let n = 0;
      for (const e of document.querySelectorAll('a[href], button, input, select, textarea, [tabindex]')) {
        const r = e.getBoundingClientRect();
        const hidden = e.disabled || e.tabIndex < 0 || e.closest('dialog:not([open]), [hidden], .sr-only') || (r.width === 0 && r.height === 0);
        if (!hidden) e.dataset.kb = String(++n);
      }
      document.activeElement && document.activeElement.blur();
      window.scrollTo(0, 0);
      return n;
    });
    const seen = new Set();
    for (let i = 0; i < all + 10; i++) {
      await page.keyboard.press('Tab');
      const k = await page.evaluate(() => (document.activeElement && document.activeElement.dataset.kb) || '');
      if (k) seen.add(k);
    }
    return page.evaluate((seen) => [...document.querySelectorAll('[data-kb]')]
      .filter((e) => !seen.includes(e.dataset.kb))
      .map((e) => `${e.tagName.toLowerCase()} ${(e.getAttribute('aria-label') || e.textContent || e.name || '').trim().slice(0, 40)}`), [...seen]);
  }

  async finish() {
    const out = { ok: this.failures.length === 0, failures: this.failures, results: this.results, screenshots: this.screenshots };
    try {
      await this.browser.close();
    } catch (e) {
      /* already gone */
    }
    process.stdout.write('\n' + JSON.stringify(out) + '\n');
  }
}

// Starts chromium. opts: width/height (the viewport), lang ('en-US'),
// quiet (no FAIL lines on stderr).
export async function start(name, opts = {}) {
  const width = opts.width || 1280;
  const height = opts.height || 900;
  const lang = opts.lang || 'en-US';
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--no-default-browser-check',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--metrics-recording-only',
      `--lang=${lang}`,
      `--window-size=${width},${height}`,
    ],
    env: { ...process.env, LANGUAGE: lang.replace('-', '_') },
    defaultViewport: { width, height },
    protocolTimeout: 120000,
  });
  const context = browser.defaultBrowserContext();
  await context.overridePermissions(ORIGIN, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write']);
  const page = (await browser.pages())[0] || (await browser.newPage());
  await page.setExtraHTTPHeaders({ 'Accept-Language': lang });
  const s = new Session(name, browser, context, page, opts);
  // a script that throws still prints its JSON
  process.on('unhandledRejection', async (e) => {
    s.fail('script error: ' + (e && e.stack ? e.stack : e));
    await s.finish();
    process.exit(1);
  });
  return s;
}

// Runs body(session) and always prints the JSON, failing on a thrown error.
export async function run(name, opts, body) {
  const s = await start(name, opts);
  try {
    await body(s);
  } catch (e) {
    s.fail('script error: ' + (e && e.stack ? e.stack : String(e)));
    try {
      await s.screenshot('error');
    } catch (x) {
      /* the page may be gone */
    }
  }
  await s.finish();
}
