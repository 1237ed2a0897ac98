// The renter's files on the File storage page (tests/integration/test_t664_storage_files.py):
// the page reaches the host only when asked (Browse), lists the region's
// storage, a file chosen in the page's file
// input is uploaded and then listed, and its Download button saves it.
//   SUANLI_EMAIL, SUANLI_PASSWORD, SUANLI_FILES_ORIGIN (the instance's files
//   host, which the page may reach), SUANLI_UPLOAD (a file), SUANLI_DOWNLOADS
//   (an empty directory)
import { existsSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { run, sleep } from './lib.mjs';

const env = process.env;
const NAME = basename(env.SUANLI_UPLOAD);

const listed = (page) =>
  page.$$eval('.files table tbody tr', (trs) => trs.map((tr) => tr.querySelector('td').textContent.trim()));

await run('t664-files', {}, async (s) => {
  const page = s.page;
  const R = s.results;
  s.allowOrigin(env.SUANLI_FILES_ORIGIN);
  const cdp = await page.target().createCDPSession();
  await cdp.send('Page.setDownloadBehavior', { behavior: 'allow', downloadPath: env.SUANLI_DOWNLOADS });
  await s.login(env.SUANLI_EMAIL, env.SUANLI_PASSWORD);
  await s.visit('/storage', { label: 'storage', waitFor: '.files button.files-browse' });
  R.requests_before = s.requests.filter((u) => u.startsWith(env.SUANLI_FILES_ORIGIN)).length;
  await page.click('.files button.files-browse');
  await page.waitForSelector('.files input.files-upload', { timeout: 30000 });
  R.heading = await page.$eval('.files h2', (h) => h.textContent.trim());
  R.before = await listed(page);
  const input = await page.$('.files input.files-upload');
  await input.uploadFile(env.SUANLI_UPLOAD);
  await page.waitForFunction(
    (n) => [...document.querySelectorAll('.files table tbody tr td:first-child')].some((td) => td.textContent.trim() === n),
    { timeout: 60000 },
    NAME,
  );
  R.after = await listed(page);
  R.note = await page.$eval('.files .files-note', (p) => p.textContent.trim()).catch(() => null);
  await s.screenshot('uploaded');
  await s.axe('files');
  // its row's Download button
  const rows = await page.$$('.files table tbody tr');
  for (const row of rows) {
    const name = await row.$eval('td', (td) => td.textContent.trim());
    if (name === NAME) await (await row.$('button')).click();
  }
  const target = join(env.SUANLI_DOWNLOADS, NAME);
  for (let i = 0; i < 600 && !existsSync(target); i++) await sleep(100);
  R.downloads = readdirSync(env.SUANLI_DOWNLOADS);
  R.error = await page.$eval('.files .error', (e) => e.textContent.trim()).catch(() => null);
});
