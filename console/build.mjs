// Builds the console into OUT (default ../build/console): index.html,
// assets/*-HASH.js|css (esm, code-split, minified) and a .gz beside each,
// and prints the first load's size (the entry, the chunks it imports
// statically, its CSS; gzipped), failing over the budget.
//
//   node build.mjs --out DIR [--report FILE] [--budget-kb 150]
import * as esbuild from 'esbuild';
import { gzipSync, constants as zc } from 'node:zlib';
import { readFileSync, writeFileSync, mkdirSync, rmSync, renameSync, existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve, relative, basename } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
function arg(name, def) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
}
const out = resolve(arg('--out', join(here, '..', 'build', 'console')));
const report = arg('--report', null);
const budgetKB = Number(arg('--budget-kb', '150'));
const src = join(here, 'src');

const tmp = out + '.tmp';
rmSync(tmp, { recursive: true, force: true });
mkdirSync(join(tmp, 'assets'), { recursive: true });

const result = await esbuild.build({
  entryPoints: { main: join(src, 'main.js') },
  bundle: true,
  splitting: true,
  format: 'esm',
  minify: true,
  sourcemap: false,
  target: ['es2020', 'chrome100', 'firefox100', 'safari15'],
  outdir: join(tmp, 'assets'),
  entryNames: '[name]-[hash]',
  chunkNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'none',
  charset: 'utf8',
  logLevel: 'warning',
  loader: { '.woff2': 'file' },
});

const meta = result.metafile.outputs;
const rel = (p) => relative(join(tmp), resolve(p)).split('\\').join('/');
let entry = null;
for (const [p, o] of Object.entries(meta)) if (o.entryPoint && o.entryPoint.endsWith('main.js') && p.endsWith('.js')) entry = p;
if (!entry) throw new Error('esbuild produced no main entry');
const css = meta[entry].cssBundle || null;

// The first load: the entry and what it imports statically, transitively.
const first = new Set();
const walk = (p) => {
  if (first.has(p)) return;
  first.add(p);
  for (const im of meta[p].imports || []) if (im.kind === 'import-statement' && !im.external) walk(im.path);
};
walk(entry);
if (css) first.add(css);

const preload = [...first].filter((p) => p !== entry && p.endsWith('.js'));
const tags = [
  css ? `<link rel="stylesheet" href="/${rel(css)}">` : '',
  ...preload.map((p) => `<link rel="modulepreload" href="/${rel(p)}">`),
  `<script type="module" src="/${rel(entry)}"></script>`,
].filter(Boolean);
const page = readFileSync(join(src, 'index.html'), 'utf8').replace('<!--ASSETS-->', tags.join('\n'));
writeFileSync(join(tmp, 'index.html'), page);

// A .gz beside every file, for suanlid to send as is.
const sizes = {};
const gz = (dir) => {
  for (const f of readdirSync(dir)) {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) gz(p);
    else if (!f.endsWith('.gz')) {
      const z = gzipSync(readFileSync(p), { level: zc.Z_BEST_COMPRESSION });
      writeFileSync(p + '.gz', z);
      sizes[relative(tmp, p).split('\\').join('/')] = { bytes: statSync(p).size, gzip: z.length };
    }
  }
};
gz(tmp);

let firstGz = sizes['index.html'].gzip;
let firstRaw = sizes['index.html'].bytes;
for (const p of first) {
  firstGz += sizes[rel(p)].gzip;
  firstRaw += sizes[rel(p)].bytes;
}
let allGz = 0;
for (const s of Object.values(sizes)) allGz += s.gzip;


const summary = {
  first_load_gzip_bytes: firstGz,
  first_load_bytes: firstRaw,
  budget_gzip_bytes: budgetKB * 1024,
  first_load_files: ['index.html', ...[...first].map(rel)],
  all_gzip_bytes: allGz,
  files: sizes,
};
if (report) writeFileSync(report, JSON.stringify(summary, null, 2) + '\n');
const kb = (n) => (n / 1024).toFixed(1) + ' KB';
console.log(
  `console: ${out}: first load ${kb(firstGz)} gzipped (${kb(firstRaw)} raw; budget ${budgetKB} KB), ` +
    `${Object.keys(sizes).length} files, ${kb(allGz)} gzipped in all`,
);
if (firstGz > budgetKB * 1024) {
  console.error(`console: the first load is ${kb(firstGz)} gzipped, over the ${budgetKB} KB budget: move code behind a dynamic import()`);
  rmSync(tmp, { recursive: true, force: true });
  process.exit(1);
}
// in place at once: the old build goes only when the new one is whole
rmSync(out + '.old', { recursive: true, force: true });
if (existsSync(out)) renameSync(out, out + '.old');
renameSync(tmp, out);
rmSync(out + '.old', { recursive: true, force: true });

