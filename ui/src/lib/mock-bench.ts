// The benchmark half of the mock service: the catalogue's files, formats read from paths, a fake
// run that steps through each format, then each remote engine's model, with setTimeout
// (progress, cancel, an error for a path naming "fail"), the runs kept in memory (a remote
// model's load time, memory and KL divergence not measured), comparisons, import, export and PNG saving, and bar
// charts drawn like the Rust side's (same SVG classes). Merged into mock.ts's commands.
import type {
  BenchColumn,
  BenchFormat,
  BenchRequest,
  BenchRow,
  BenchRunSummary,
  BenchView,
  CatalogueModel,
  ModelFormat,
} from './api';
import { remotePath } from './format';

type Args = Record<string, any>;
type Emit = (event: string, payload: unknown) => void;

const CATALOGUE: CatalogueModel[] = [
  {
    id: 'qwen3-0.6b',
    name: 'Qwen3 0.6B',
    files: [
      '/home/me/models/Qwen3-0.6B-Q8_0.gguf',
      '/home/me/models/Qwen3-0.6B',
      '/home/me/.cache/huggingface/hub/models--mlx-community--Qwen3-0.6B-4bit',
    ],
  },
  { id: 'llama-3.2-1b-instruct', name: 'Llama 3.2 1B Instruct', files: ['/home/me/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf'] },
];

const COLUMNS: BenchColumn[] = [
  { title: 'Cold load', short: 'load', unit: 's', better: 'lower' },
  { title: 'Decode', short: 'decode', unit: 'tok/s', better: 'higher' },
  { title: 'Peak memory', short: 'memory', unit: 'GiB', better: 'lower' },
  { title: 'KL divergence', short: 'kl', unit: '', better: 'lower' },
];

/** Per format kind: load s, decode tok/s, memory per GiB of weights, KL divergence. */
const BASE: Record<ModelFormat, [number, number, number, number]> = {
  gguf: [0.42, 41.5, 1.12, 0.0031],
  safetensors: [1.18, 27.9, 1.05, 0],
  mlx: [0.61, 46.2, 1.09, 0.0154],
};

function formatOf(path: string): ModelFormat | null {
  const p = path.toLowerCase();
  if (p.endsWith('.gguf')) return 'gguf';
  if (p.includes('mlx')) return 'mlx';
  if (p.endsWith('.safetensors')) return 'safetensors';
  const last = p.split(/[\\/]/).pop() ?? '';
  return last && !/\.[a-z][a-z0-9]*$/.test(last) ? 'safetensors' : null; // a folder ("Qwen3-0.6B" is one)
}

function labelOf(path: string, format: ModelFormat): string {
  if (format === 'gguf') return `gguf ${/(Q\d_[A-Z0-9_]+|Q\d_\d|BF16|F16|F32)/i.exec(path)?.[1] ?? 'F16'}`;
  if (format === 'mlx') return `mlx ${/(\d+bit)/i.exec(path)?.[1] ?? 'bf16'}`;
  return 'safetensors BF16';
}

export function mockBenchFormat(path: string): BenchFormat {
  const format = formatOf(path);
  if (!format) throw `"${path}" is not a model Minerva can benchmark: expected a .gguf file, a .safetensors file, or a model folder.`;
  const label = labelOf(path, format);
  const bytes = format === 'safetensors' ? 1_503_000_000 : /q4|4bit/i.test(label) ? 480_000_000 : 805_000_000;
  return { path, label, format, bytes };
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A horizontal bar per label at `values[i]` (null: not measured), whiskers ±4%, like svg.rs. */
export function mockChart(col: BenchColumn, labels: string[], values: (number | null)[], reference: number | null): string {
  const [W, LW, VW, RH, TOP] = [600, 170, 80, 28, 44];
  const plotW = W - LW - VW;
  const measured = values.filter((v): v is number => v != null);
  const top = measured.length ? Math.max(1e-9, ...measured.map((v) => v * 1.04)) : 1;
  const height = TOP + RH * labels.length + 26;
  const x = (v: number) => LW + (Math.max(0, v) / top) * plotW;
  const dir = col.better === 'higher' ? 'higher is better' : 'lower is better';
  const unit = col.unit ? ` (${col.unit})` : '';
  const axisY = TOP + RH * labels.length;
  let s =
    `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 ${W} ${height}" width="${W}" height="${height}" role="img" aria-label="${esc(col.title)}">` +
    `<title>${esc(col.title + unit)}, ${dir}</title>` +
    `<text class="title" x="0" y="18">${esc(col.title + unit)}</text>` +
    `<text class="note" x="0" y="34">${dir}; bars are medians, whiskers min to max</text>`;
  for (let k = 0; k <= 4; k++) {
    const tx = x((top * k) / 4).toFixed(1);
    s += `<line class="grid" x1="${tx}" y1="${TOP}" x2="${tx}" y2="${axisY}"/>`;
    s += `<text class="tick" x="${tx}" y="${axisY + 16}" text-anchor="middle">${+((top * k) / 4).toPrecision(2)}</text>`;
  }
  labels.forEach((label, i) => {
    const y = TOP + RH * i;
    const cy = y + RH / 2;
    s += `<text class="label" x="${LW - 8}" y="${cy + 4}" text-anchor="end">${esc(label)}</text>`;
    const v = values[i];
    if (v == null) {
      s += `<text class="value" x="${LW + 4}" y="${cy + 4}">not measured</text>`;
      return;
    }
    const cls = `bar f${i % 8}${i === reference ? ' reference' : ''}`;
    s += `<rect class="${cls}" x="${LW}" y="${y + 5}" width="${Math.max(1, x(v) - LW).toFixed(1)}" height="${RH - 10}"><title>${esc(label)}: ${v}</title></rect>`;
    const [a, b] = [x(v * 0.96).toFixed(1), x(v * 1.04).toFixed(1)];
    s += `<path class="whisker" d="M${a},${cy}H${b}M${a},${cy - 5}V${cy + 5}M${b},${cy - 5}V${cy + 5}"/>`;
    s += `<text class="value" x="${(x(v * 1.04) + 6).toFixed(1)}" y="${cy + 4}">${v}</text>`;
  });
  return s + `<line class="axis" x1="${LW}" y1="${axisY}" x2="${LW + plotW}" y2="${axisY}"/></svg>`;
}

/** A remote engine's model as a run keeps it: its path `<url>#<model>`, measured from the stream. */
interface RemoteEntry {
  path: string;
  label: string;
  format: 'remote';
  bytes: 0;
}
type Entry = BenchFormat | RemoteEntry;

/** Decode tok/s of a remote engine's model (a server GPU: faster than the files here). */
const REMOTE_DECODE = 88.4;

function remoteEntry(path: string): RemoteEntry {
  const r = remotePath(path);
  if (!r || !r.model) throw `"${path}" is not a remote engine's model: expected <engine url>#<model id>.`;
  return { path, label: `remote: ${r.model} @ ${r.host}`, format: 'remote', bytes: 0 };
}

interface StoredRun {
  summary: BenchRunSummary;
  formats: Entry[];
}

/**
 * The figures of one format: null where not measured (quality against itself, or cut short; a
 * remote model's load time, memory, and KL divergence, which needs every log-probability).
 */
function figures(f: Entry, isReference: boolean, measured: boolean): (number | null)[] {
  if (f.format === 'remote') return [null, measured ? REMOTE_DECODE : null, null, null];
  const [load, decode, mem, kl] = BASE[f.format];
  const small = f.bytes < 600_000_000;
  return [
    load,
    small ? +(decode * 1.3).toFixed(1) : decode,
    +((f.bytes / 2 ** 30) * mem).toFixed(2),
    isReference || !measured ? null : small ? kl * 4 : kl,
  ];
}

/** The format quality is measured against: safetensors, else the first; none with only remotes. */
function referenceOf(formats: Entry[]): number | null {
  const i = formats.findIndex((f) => f.format === 'safetensors');
  if (i >= 0) return i;
  return formats.length && formats[0].format !== 'remote' ? 0 : null;
}

function viewOf(runs: StoredRun[], prefixes: string[]): BenchView {
  const labels: string[] = [];
  const values: (number | null)[][] = [];
  let reference: number | null = null;
  runs.forEach((run, k) => {
    const ref = referenceOf(run.formats);
    run.formats.forEach((f, i) => {
      if (k === 0 && i === ref) reference = labels.length;
      labels.push(prefixes[k] + f.label);
      values.push(figures(f, i === ref, !run.summary.interrupted || i === 0));
    });
  });
  const rows: BenchRow[] = labels.map((label, i) => ({
    label,
    reference: i === reference,
    cells: values[i].map((v) => (v == null ? null : String(v))),
  }));
  const charts = COLUMNS.map((c, j) => mockChart(c, labels, values.map((v) => v[j]), reference));
  const byDecode = labels.map((l, i) => [l, values[i][1] ?? 0] as const).sort((a, b) => b[1] - a[1]);
  const verdicts = [`${byDecode[0][0]} decodes fastest: ${byDecode[0][1]} tokens per second.`];
  if (reference != null) verdicts.push(`${labels[reference]} is the reference for quality; the other formats stay close to it.`);
  if (runs.some((r) => r.formats.some((f) => f.format === 'remote'))) {
    verdicts.push('Remote engines: load time and memory are not measured, and KL divergence needs every log-probability.');
  }
  if (runs.some((r) => r.summary.interrupted)) verdicts.push('The run was stopped early: some figures were not measured.');
  return { summary: { ...runs[0].summary }, report: { mock: true, runs: runs.map((r) => r.summary) }, columns: COLUMNS, rows, charts, verdicts };
}

/**
 * The bench commands of the mock service; `tickMs` between two progress steps. `knownEngine`
 * says whether a remote engine (its url) was added; without it, any engine is.
 */
export function createBenchMock(emit: Emit, tickMs: number, knownEngine: (url: string) => boolean = () => true) {
  const now = () => Date.now();
  let nextRun = 1;
  let nextJob = 1;
  const runs: StoredRun[] = [];
  let active: { job: number; timer: ReturnType<typeof setTimeout> | null; finish: (interrupted: boolean) => void } | null = null;

  const store = (model: string, formats: Entry[], extra: Partial<BenchRunSummary>): StoredRun => {
    const run: StoredRun = {
      summary: { id: nextRun++, created_at: now(), model, backend: 'auto', device: 'Mock GPU (Vulkan)', formats: formats.map((f) => f.label), interrupted: false, imported: false, ...extra },
      formats,
    };
    runs.push(run);
    return run;
  };
  const find = (id: unknown) => {
    const run = runs.find((r) => r.summary.id === id);
    if (!run) throw `There is no benchmark run ${id}.`;
    return run;
  };
  // Two past runs, so the history is not empty in the dev server.
  const qwen = CATALOGUE[0].files.map(mockBenchFormat);
  store('Qwen3 0.6B', qwen, { created_at: now() - 2 * 86_400_000 });
  store('Qwen3 0.6B', qwen.slice(0, 2), { created_at: now() - 3_600_000, backend: 'cpu', device: 'CPU (16 cores)', interrupted: true });

  function start(request: BenchRequest): number {
    if (active) throw 'A benchmark is already running: cancel it or wait for it to end.';
    const paths = request.paths ?? [];
    const remotes = request.remotes ?? [];
    if (!paths.length && !remotes.length) throw 'Pick at least one format or remote model to compare.';
    const local = paths.map(mockBenchFormat);
    const remote = remotes.map(remoteEntry);
    for (const r of remote) {
      const url = r.path.slice(0, r.path.indexOf('#'));
      if (!knownEngine(url)) throw `${url} is not among the remote engines: add it first.`;
    }
    const formats: Entry[] = [...local, ...remote];
    const job = nextJob++;
    // A remote model has no load; its quality is scored against a local reference, if any.
    const steps: { format: number; phase: string }[][] = formats.map((e, i) => {
      const s: { format: number; phase: string }[] = e.format === 'remote' ? [] : [{ format: i, phase: 'cold load' }];
      for (const p of request.prompt_tokens) for (let r = 1; r <= request.runs; r++) s.push({ format: i, phase: `prompt ${p} · run ${r}/${request.runs}` });
      if (request.quality_tokens > 0 && local.length) s.push({ format: i, phase: 'quality' });
      return s;
    });
    let f = 0;
    let k = 0;
    const backend = request.backend;
    const finish = (interrupted: boolean) => {
      if (active?.timer) clearTimeout(active.timer);
      active = null;
      const run = store(request.model, formats, { backend, device: backend === 'cpu' ? 'CPU (16 cores)' : 'Mock GPU (Vulkan)', interrupted });
      emit('bench-done', { job, run: { ...run.summary } });
    };
    const step = () => {
      if (!active) return;
      active.timer = null;
      const total = steps[f].length;
      if (/fail/i.test(formats[f].path) && k === 2) {
        active = null;
        emit('bench-error', { job, message: `${formats[f].label}: the benchmark process ended early (exit status 1).` });
        return;
      }
      emit('bench-progress', { job, format: f, label: formats[f].label, done: k, total, phase: k < total ? steps[f][k].phase : 'done' });
      if (k < total) k++;
      else if (f + 1 < formats.length) [f, k] = [f + 1, 0];
      else return finish(false);
      active.timer = setTimeout(step, tickMs);
    };
    active = { job, timer: setTimeout(step, tickMs), finish };
    return job;
  }

  const commands: Record<string, (a: Args) => unknown> = {
    bench_catalogue: () => CATALOGUE.map((c) => ({ ...c, files: c.files.slice() })),
    bench_formats: ({ paths }) => (paths as string[]).map(mockBenchFormat),
    start_bench: ({ request }) => start(request as BenchRequest),
    cancel_bench: () => {
      active?.finish(true);
      return null;
    },
    bench_runs: () => runs.map((r) => ({ ...r.summary })).sort((a, b) => b.created_at - a.created_at),
    bench_run: ({ id }) => viewOf([find(id)], ['']),
    compare_bench_runs: ({ a, b }) => viewOf([find(a), find(b)], ['A · ', 'B · ']),
    delete_bench_run: ({ id }) => {
      runs.splice(runs.indexOf(find(id)), 1);
      return null;
    },
    import_bench_report: ({ path }) => {
      const p = String(path ?? '');
      if (!p.toLowerCase().endsWith('.json')) throw `"${p}" is not a benchmark report: expected the .json file minerva bench writes.`;
      const name = (p.split(/[\\/]/).pop() ?? p).replace(/\.json$/i, '');
      return { ...store(name, qwen.slice(0, 2), { imported: true, device: 'Apple M2 (Metal)' }).summary };
    },
    export_bench_run: ({ id, format }) => {
      find(id);
      if (!['json', 'csv', 'markdown', 'html'].includes(format)) throw `Unknown export format "${format}".`;
      return null;
    },
    save_png: ({ base64 }) => {
      if (!base64) throw 'The image is empty.';
      return null;
    },
  };
  return commands;
}
