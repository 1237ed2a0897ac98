// The admin pages' arithmetic, without a browser (node --test; run by
// tests/integration/test_t540_console_admin.py): money typed by an operator
// becomes exact micros, the fleet's usage and run rate, the price in effect,
// the per-day revenue and GPU-hours of GET /v1/admin/bills.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseAmount, microsToText, notAdmin } from '../../console/src/admin/common.js';
import { usageRows, instanceStates, monthDays, gpuHours, thisMonth } from '../../console/src/admin/usage.js';
import { inEffect } from '../../console/src/admin/prices.js';
import { gpuSummary, fleetTotals } from '../../console/src/admin/hosts.js';
import { adminRoutes } from '../../console/src/admin/routes.js';

test('amounts are exact micros, never floating point', () => {
  assert.equal(parseAmount('123.45'), 123_450_000);
  assert.equal(parseAmount('0.000001'), 1);
  assert.equal(parseAmount('0.1'), 100_000);
  assert.equal(parseAmount('8.2'), 8_200_000); // 8.2 * 1e6 is 8199999.999999999 in floating point
  assert.equal(parseAmount('1.005'), 1_005_000);
  assert.equal(parseAmount(' ¥1,000 '), 1_000_000_000);
  assert.equal(parseAmount('1000000000'), 1e15); // the credit route's maximum
  for (const bad of ['', 'abc', '-5', '1.2345678', '1e3', '0x10', '1.2.3'])
    assert.throws(() => parseAmount(bad), /amount/, bad);
  assert.throws(() => parseAmount('0'), /above zero/);
  assert.equal(parseAmount('0', { allowZero: true }), 0);
  assert.throws(() => parseAmount('1000000001'), /too large/);
  assert.equal(microsToText(1_980_000), '1.98');
  assert.equal(microsToText(5_000_000), '5');
  assert.equal(microsToText(1), '0.000001');
});

test('only the API saying not_found means not an admin', () => {
  assert.equal(notAdmin({ status: 404, code: 'not_found' }), true);
  assert.equal(notAdmin({ status: 404, code: 'no_such_node' }), false);
  assert.equal(notAdmin({ status: 401, code: 'unauthenticated' }), false);
});

const node = (id, region, gpus, instances, state = 'online') => ({
  id, region, state, gpus, instances, gpus_total: gpus.length, gpus_free: gpus.filter((g) => !g.instance_id).length,
});
const gpu = (model, instance_id = null, simulated = false, name = 'NVIDIA ' + model) => ({ model, name, instance_id, simulated });

test('usage per region and model, with the pay-as-you-go run rate', () => {
  const nodes = [
    node('n-a', 'bj-1', [gpu('RTX 4090', 'i-1'), gpu('RTX 4090', 'i-1'), gpu('RTX 4090', 'i-2'), gpu('RTX 4090')],
      [{ id: 'i-1', state: 'running', plan: 'payg' }, { id: 'i-2', state: 'running', plan: 'month' }, { id: 'i-3', state: 'stopped', plan: 'payg' }]),
    node('n-b', 'bj-1', [gpu('RTX 4090', null, true), gpu(null, null, false, 'Tesla T4')], [], 'offline'),
    node('n-c', 'sh-1', [gpu('RTX 4090', 'i-4')], [{ id: 'i-4', state: 'running', plan: 'payg' }]),
  ];
  const prices = new Map([
    ['bj-1', new Map([['RTX 4090', 2_000_000]])],
    ['sh-1', new Map([['RTX 4090', 3_000_000]])],
  ]);
  const rows = usageRows(nodes, prices);
  const bj = rows.find((r) => r.region === 'bj-1' && r.model === 'RTX 4090');
  assert.deepEqual({ hosts: bj.hosts, total: bj.total, used: bj.used, simulated: bj.simulated, payg: bj.payg, perHour: bj.perHour },
    { hosts: 2, total: 5, used: 3, simulated: 1, payg: 2, perHour: 4_000_000 }); // the month plan's GPU is prepaid
  const t4 = rows.find((r) => r.name === 'Tesla T4');
  assert.equal(t4.model, null);
  assert.equal(t4.price, null);
  assert.equal(rows.find((r) => r.region === 'sh-1').perHour, 3_000_000);
  const states = instanceStates(nodes);
  assert.deepEqual(states.find((s) => s.state === 'running'), { key: 'running', state: 'running', count: 3, payg: 2, plan: 1 });
  assert.deepEqual(fleetTotals(nodes), { hosts: 3, online: 2, used: 4, total: 7 });
  assert.equal(gpuSummary(nodes[1]), '1× RTX 4090, 1× Tesla T4');
});

test('revenue and GPU-hours per day from the bill of all renters', () => {
  const bill = {
    month: '2026-12', by: 'day', currency: 'CNY', total_micros: 9_500_000,
    rows: [
      { key: '2026-12-01', day: '2026-12-01', amount_micros: 2_000_000, charges: 3, seconds: 7200, gpu_seconds: 14_400, by_kind: { gpu: 2_000_000 } },
      { key: '2026-12-02', day: '2026-12-02', amount_micros: 7_500_000, charges: 2, seconds: 90, gpu_seconds: 100, by_kind: { gpu: 1_500_000, plan: 6_000_000 } },
    ],
  };
  const m = monthDays(bill);
  assert.deepEqual(m.days.map((d) => [d.day, d.amount, d.charges, d.gpuHours]), [
    ['2026-12-02', 7_500_000, 2, 0.03], // newest first; 100 GPU-seconds to two decimals
    ['2026-12-01', 2_000_000, 3, 4],
  ]);
  assert.equal(m.total, 9_500_000);
  assert.equal(m.charges, 5);
  assert.equal(m.gpuHours, 4.03);
  assert.deepEqual(monthDays({ ...bill, total_micros: 0, rows: [] }), { days: [], total: 0, charges: 0, gpuHours: 0 });
  assert.equal(gpuHours(undefined), 0);
  assert.equal(gpuHours(5400), 1.5);
  assert.equal(thisMonth(new Date('2026-12-31T23:59:59Z')), '2026-12');
});

test('the price in effect is the newest that has come, per item and region', () => {
  const now = Date.parse('2026-12-01T12:00:00Z');
  const rows = [
    { seq: 1, item: 'gpu:gpu-a', region: '', effective_from: '2026-01-01T00:00:00Z' },
    { seq: 2, item: 'gpu:gpu-a', region: '', effective_from: '2026-06-01T00:00:00Z' },
    { seq: 3, item: 'gpu:gpu-a', region: 'bj-1', effective_from: '2026-03-01T00:00:00Z' },
    { seq: 4, item: 'gpu:gpu-a', region: '', effective_from: '2027-01-01T00:00:00Z' },
    { seq: 5, item: 'nogpu', region: '', effective_from: '2026-06-01T00:00:00Z' },
    { seq: 6, item: 'nogpu', region: '', effective_from: '2026-06-01T00:00:00Z' },
  ];
  assert.deepEqual([...inEffect(rows, now)].sort(), [2, 3, 6]);
});

test('every admin page is listed, lazily loaded, with a navigation label', async () => {
  assert.deepEqual(adminRoutes.map((r) => r.path), ['/admin/hosts', '/admin/join-tokens', '/admin/verifications',
    '/admin/users', '/admin/gpu-models', '/admin/prices', '/admin/images', '/admin/usage']);
  for (const r of adminRoutes) {
    assert.match(r.nav, /^admin\.nav\./);
    assert.equal(typeof (await r.load()).default, 'function', r.path);
  }
});

test('every message has English and Chinese, and every key used exists', async () => {
  const { readdirSync, readFileSync } = await import('node:fs');
  const dir = new URL('../../console/src/admin/', import.meta.url);
  const defined = { en: new Set(), zh: new Set() };
  const used = new Set();
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.js'))) {
    const src = readFileSync(new URL(f, dir), 'utf8');
    const m = /addMessages\(\{\s*en: \{([\s\S]*?)\n {2}\},\n {2}zh: \{([\s\S]*?)\n {2}\},\n\}\);/.exec(src);
    if (m) {
      const keys = (block) => [...block.matchAll(/^\s+'([\w.]+)':/gm)].map((k) => k[1]);
      const en = keys(m[1]);
      const zh = keys(m[2]);
      assert.deepEqual([...zh].sort(), [...en].sort(), `${f}: en and zh keys differ`);
      for (const k of en) defined.en.add(k);
    }
    // used: quoted anywhere but in a definition (maps and ternaries name keys too)
    for (const k of src.replace(/^\s+'[\w.]+':.*$/gm, '').matchAll(/'(admin\.[\w.]+)'/g)) used.add(k[1]);
  }
  // keys built at run time: a state, role or kind appended
  const dynamic = /^admin\.(hosts\.state|ver\.state|users\.role|users\.ver|img\.state|gpu\.item|prices\.item)\.$/;
  for (const k of used) if (!dynamic.test(k)) assert.ok(defined.en.has(k), `${k} is used but not defined`);
  for (const k of defined.en) {
    if (k.startsWith('admin.nav.')) continue;
    const base = k.replace(/[^.]+$/, '');
    assert.ok(used.has(k) || dynamic.test(base), `${k} is defined but never used`);
  }
});
