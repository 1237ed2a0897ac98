// t531: the terminal in the console (issue 13, item 3), in Debian's
// chromium: log in, open an instance's page, open its terminal, type
// `hostname`, read the instance id from xterm's screen; close the terminal
// and open it again: tmux kept the screen. Environment (lib.mjs):
// SUANLI_URL, SUANLI_EMAIL, SUANLI_PASSWORD, and SUANLI_INSTANCE, the
// renter's running instance. The websocket goes to the instance's terminal
// host, the one origin besides the server's this flow may reach.
import { start } from './lib.mjs';

const s = await start('t531-terminal');
const R = s.results;
const id = process.env.SUANLI_INSTANCE;
const page = s.page;

async function screenText() {
  return page.evaluate(() => {
    const rows = document.querySelector('.xterm-rows');
    return rows ? rows.textContent : '';
  });
}

async function waitScreen(fn, what, timeout = 30000) {
  try {
    await page.waitForFunction(fn, { timeout, polling: 200 }, id);
  } catch (e) {
    throw new Error(`${what}: the screen shows ${JSON.stringify((await screenText()).slice(-600))}`);
  }
}

try {
  await s.login(process.env.SUANLI_EMAIL, process.env.SUANLI_PASSWORD);
  await s.visit(`/instances/${id}`, { label: 'instance' });
  const ticketUrls = [];
  page.on('response', async (r) => {
    if (r.url().endsWith(`/v1/instances/${id}/terminal`) && r.status() === 201) {
      const u = new URL((await r.json()).url);
      ticketUrls.push(u.host);
      s.allowOrigin(`http://${u.host}`);
      s.allowOrigin(`ws://${u.host}`);
    }
  });
  await s.clickText('Terminal');
  await page.waitForSelector('.xterm-rows', { timeout: 30000 });
  await waitScreen(() => /Connected|已连接/.test((document.querySelector('.terminal [role=status]') || {}).textContent || ''), 'connected');
  // tmux's status line names the session
  await waitScreen(() => (document.querySelector('.xterm-rows') || {}).textContent.includes('[console]'), 'tmux');
  await page.click('.xterm');
  await page.keyboard.type('hostname; echo WEB-$((5*5))');
  await page.keyboard.press('Enter');
  await waitScreen((id) => {
    const t = document.querySelector('.xterm-rows').textContent;
    return t.includes('WEB-25') && t.split(id).length > 2; // the prompt and hostname's output
  }, 'hostname');
  R.hostname = true;
  R.terminal_host = ticketUrls[0];
  await s.axe('terminal open');
  await s.screenshot('terminal');
  // closed and opened again: the same tmux session, its screen redrawn
  await s.clickText('Close terminal');
  await page.waitForFunction(() => !document.querySelector('.xterm-rows'), { timeout: 10000 });
  await s.clickText('Terminal');
  await page.waitForSelector('.xterm-rows', { timeout: 30000 });
  await waitScreen(() => (document.querySelector('.xterm-rows') || {}).textContent.includes('WEB-25'), 'reattach');
  R.reattached = true;
  await s.screenshot('terminal-again');
  // phone width: the terminal fits the screen
  await page.setViewport({ width: 390, height: 844 });
  await waitScreen(() => {
    const x = document.querySelector('.xterm');
    return x && x.getBoundingClientRect().right <= window.innerWidth + 1;
  }, 'phone width');
  await s.screenshot('terminal-phone');
} catch (e) {
  s.fail(String((e && e.stack) || e));
}
await s.finish();
