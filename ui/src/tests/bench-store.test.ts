// The bench store: progress events become a row per format, the run ends on bench-done (and
// opens), cancel, errors, events before start_bench answers, the request it sends (remote
// engines' models ticked apart, after the formats), the default backend from the app's settings,
// and compare only with exactly two runs picked.
import { describe, expect, it } from 'vitest';
import { BenchStore, nameForPaths, parsePromptLengths, remoteLabel } from '../lib/stores/bench.svelte';
import type { AppSettings, BenchFormat, BenchRunSummary, BenchView, FoundModel } from '../lib/api';
import { fakeTransport, settle } from './fake';

const FORMATS: BenchFormat[] = [
  { path: '/m/q-Q8_0.gguf', label: 'gguf Q8_0', format: 'gguf', bytes: 8e8 },
  { path: '/m/q', label: 'safetensors BF16', format: 'safetensors', bytes: 15e8 },
];
const REMOTES: FoundModel[] = [
  { path: 'http://gpu-box:8000/v1#Qwen/Qwen3-8B', name: 'Qwen/Qwen3-8B', format: 'remote', bytes: 0, source: 'remote' },
  { path: 'http://10.0.0.5:8080/v1#gemma-3-4b-it', name: 'gemma-3-4b-it', format: 'remote', bytes: 0, source: 'remote' },
];
const summary = (id: number, created_at: number, extra: Partial<BenchRunSummary> = {}): BenchRunSummary => ({
  id,
  created_at,
  model: 'q',
  backend: 'auto',
  device: 'Test GPU',
  formats: ['gguf Q8_0', 'safetensors BF16'],
  interrupted: false,
  imported: false,
  ...extra,
});
const viewOf = (s: BenchRunSummary): BenchView => ({
  summary: s,
  report: {},
  columns: [{ title: 'Decode', short: 'decode', unit: 'tok/s', better: 'higher' }],
  rows: [{ label: 'gguf Q8_0', reference: false, cells: ['41.5'] }],
  charts: ['<svg class="chart"></svg>'],
  verdicts: ['gguf Q8_0 decodes fastest.'],
});

async function setup(settings: AppSettings | null = null, found: FoundModel[] = []) {
  const runs = [summary(1, 1000), summary(2, 3000), summary(3, 2000)];
  const fake = fakeTransport({
    bench_catalogue: () => [{ id: 'q', name: 'Q', files: ['/m/q-Q8_0.gguf', '/m/q'] }],
    found_models: () => found,
    bench_runs: () => runs,
    bench_formats: ({ paths }: { paths: string[] }) => FORMATS.filter((f) => paths.includes(f.path)),
    start_bench: () => 7,
    bench_run: ({ id }: { id: number }) => viewOf(summary(id, 5000)),
    compare_bench_runs: ({ a }: { a: number }) => viewOf(summary(a, 0)),
  });
  const bench = new BenchStore(fake.transport, settings ? { settings } : null);
  await bench.init();
  await bench.refresh();
  await bench.choose('cat:q');
  return { fake, bench, runs };
}

describe('bench store', () => {
  it('reads the formats of a catalogue model, all ticked, and sends the request', async () => {
    const { fake, bench } = await setup();
    expect(fake.called('bench_formats')[0].args).toEqual({ paths: ['/m/q-Q8_0.gguf', '/m/q'] });
    expect(bench.checked).toEqual(['/m/q-Q8_0.gguf', '/m/q']);
    bench.promptText = '64, 256';
    bench.runs = 2;
    await bench.start();
    expect(fake.called('start_bench')[0].args).toEqual({
      request: {
        model: 'Q',
        paths: ['/m/q-Q8_0.gguf', '/m/q'],
        backend: 'auto',
        prompt_tokens: [64, 256],
        gen_tokens: 128,
        runs: 2,
        quality_tokens: 512,
        remotes: [],
      },
    });
  });

  it('turns progress events into a row per format and ends on bench-done', async () => {
    const { fake, bench } = await setup();
    await bench.start();
    expect(bench.running).toBe(true);
    expect(bench.progress.map((r) => r.label)).toEqual(['gguf Q8_0', 'safetensors BF16']);
    fake.emit('bench-progress', { job: 7, format: 0, label: 'gguf Q8_0', done: 3, total: 8, phase: 'prompt 128 · run 2/3' });
    fake.emit('bench-progress', { job: 7, format: 1, label: 'safetensors BF16', done: 1, total: 8, phase: 'cold load' });
    fake.emit('bench-progress', { job: 99, format: 0, label: 'other', done: 8, total: 8, phase: 'done' });
    expect(bench.progress).toEqual([
      { label: 'gguf Q8_0', done: 3, total: 8, phase: 'prompt 128 · run 2/3' },
      { label: 'safetensors BF16', done: 1, total: 8, phase: 'cold load' },
    ]);
    fake.emit('bench-done', { job: 7, run: summary(4, 9000) });
    expect(bench.running).toBe(false);
    await settle();
    expect(fake.called('bench_run').at(-1)?.args).toEqual({ id: 4 });
    expect(bench.view?.summary.id).toBe(4);
    expect(bench.viewKind).toBe('run');
    expect(bench.notice).toBeNull();
    // After the end, nothing moves the rows.
    fake.emit('bench-progress', { job: 7, format: 0, label: 'gguf Q8_0', done: 8, total: 8, phase: 'done' });
    expect(bench.progress[0].done).toBe(3);
  });

  it('keeps events that arrive before start_bench answers', async () => {
    const { fake, bench } = await setup();
    let release!: (v: unknown) => void;
    fake.handlers.start_bench = () => new Promise((r) => (release = r));
    const started = bench.start();
    await settle();
    fake.emit('bench-progress', { job: 8, format: 1, label: 'safetensors BF16', done: 2, total: 5, phase: 'quality' });
    release(8);
    await started;
    expect(bench.job).toBe(8);
    expect(bench.progress[1]).toEqual({ label: 'safetensors BF16', done: 2, total: 5, phase: 'quality' });
  });

  it('cancel calls cancel_bench; the stopped run still ends and says so', async () => {
    const { fake, bench } = await setup();
    await bench.start();
    await bench.cancel();
    expect(fake.called('cancel_bench')).toHaveLength(1);
    expect(bench.cancelling).toBe(true);
    fake.emit('bench-done', { job: 7, run: summary(5, 9000, { interrupted: true }) });
    expect(bench.running).toBe(false);
    expect(bench.notice).toMatch(/Stopped early/);
  });

  it('shows bench-error and a refused start in words, and can run again', async () => {
    const { fake, bench } = await setup();
    await bench.start();
    fake.emit('bench-error', { job: 7, message: 'gguf Q8_0: the process ended early.' });
    expect(bench.running).toBe(false);
    expect(bench.error).toBe('gguf Q8_0: the process ended early.');
    fake.handlers.start_bench = () => Promise.reject('A benchmark is already running.');
    await bench.start();
    expect(bench.running).toBe(false);
    expect(bench.error).toBe('A benchmark is already running.');
  });

  it('will not run with no format ticked or a bad prompt length', async () => {
    const { fake, bench } = await setup();
    bench.checked = [];
    expect(bench.canRun).toBe(false);
    bench.checked = ['/m/q'];
    expect(bench.canRun).toBe(true);
    bench.promptText = '128,abc';
    expect(bench.canRun).toBe(false);
    await bench.start();
    expect(fake.called('start_bench')).toHaveLength(0);
  });

  it('lists remote models apart, none ticked, and sends the ticked ones after the formats', async () => {
    const disk: FoundModel = { path: '/m/x.gguf', name: 'x', format: 'gguf', bytes: 1e8, source: 'lmstudio' };
    const { fake, bench } = await setup(null, [disk, ...REMOTES]);
    expect(bench.found.map((m) => m.path)).toEqual(['/m/x.gguf']);
    expect(bench.remoteModels.map((m) => m.path)).toEqual(REMOTES.map((m) => m.path));
    expect(bench.checkedRemotes).toEqual([]);
    expect(bench.request?.remotes).toEqual([]);

    bench.checkedRemotes = [REMOTES[1].path];
    await bench.start();
    expect(fake.called('start_bench')[0].args.request).toMatchObject({
      model: 'Q',
      paths: ['/m/q-Q8_0.gguf', '/m/q'],
      remotes: ['http://10.0.0.5:8080/v1#gemma-3-4b-it'],
    });
    expect(bench.progress.map((r) => r.label)).toEqual(['gguf Q8_0', 'safetensors BF16', 'remote: gemma-3-4b-it @ 10.0.0.5:8080']);
    // A remote model's events come after the paths': format = paths.length + r.
    fake.emit('bench-progress', { job: 7, format: 2, label: 'remote: gemma-3-4b-it @ 10.0.0.5:8080', done: 2, total: 4, phase: 'run 1/3: prompt 512' });
    expect(bench.progress[2]).toEqual({ label: 'remote: gemma-3-4b-it @ 10.0.0.5:8080', done: 2, total: 4, phase: 'run 1/3: prompt 512' });
    expect(bench.progress[0].phase).toBe('waiting');
  });

  it('runs with only a remote model ticked, named after it', async () => {
    const { fake, bench } = await setup(null, REMOTES);
    bench.checked = [];
    expect(bench.canRun).toBe(false);
    bench.checkedRemotes = [REMOTES[0].path];
    expect(bench.canRun).toBe(true);
    bench.model = '';
    await bench.start();
    expect(fake.called('start_bench')[0].args.request).toMatchObject({
      model: 'Qwen/Qwen3-8B',
      paths: [],
      remotes: ['http://gpu-box:8000/v1#Qwen/Qwen3-8B'],
    });
    expect(bench.progress).toEqual([{ label: 'remote: Qwen/Qwen3-8B @ gpu-box:8000', done: 0, total: 0, phase: 'waiting' }]);
  });

  it('keeps remote ticks only for models still found', async () => {
    const { fake, bench } = await setup(null, REMOTES);
    bench.checkedRemotes = REMOTES.map((m) => m.path);
    fake.handlers.found_models = () => [REMOTES[1]];
    await bench.refresh();
    expect(bench.checkedRemotes).toEqual([REMOTES[1].path]);
    expect(bench.request?.remotes).toEqual([REMOTES[1].path]);
  });

  it('takes the default backend from the app settings until the user picks one', async () => {
    const settings: AppSettings = { adapter: 'cpu', default_ctx: null, model_folders: [], data_folder: '/d', theme: 'system' };
    const { bench } = await setup(settings);
    expect(bench.backend).toBe('cpu');
    bench.backend = 'gpu';
    expect(bench.request?.backend).toBe('gpu');
    const plain = await setup({ ...settings, adapter: 'Some GPU' });
    expect(plain.bench.backend).toBe('auto');
  });

  it('lists runs newest first and compares only exactly two (older as A)', async () => {
    const { fake, bench } = await setup();
    expect(bench.history.map((r) => r.id)).toEqual([2, 3, 1]);
    bench.togglePick(2, true);
    expect(bench.canCompare).toBe(false);
    await bench.compare();
    expect(fake.called('compare_bench_runs')).toHaveLength(0);
    bench.togglePick(1, true);
    expect(bench.canCompare).toBe(true);
    await bench.compare();
    expect(fake.called('compare_bench_runs')[0].args).toEqual({ a: 1, b: 2 });
    expect(bench.viewKind).toBe('compare');
    bench.togglePick(3, true);
    expect(bench.canCompare).toBe(false);
  });
});

describe('bench helpers', () => {
  it('parses prompt lengths', () => {
    expect(parsePromptLengths('128,512')).toEqual([128, 512]);
    expect(parsePromptLengths(' 64 , 256 1024')).toEqual([64, 256, 1024]);
    expect(parsePromptLengths('')).toBeNull();
    expect(parsePromptLengths('128,0')).toBeNull();
    expect(parsePromptLengths('12.5')).toBeNull();
  });

  it('labels a remote model as the service does', () => {
    expect(remoteLabel('http://gpu-box:8000/v1#Qwen/Qwen3-8B')).toBe('remote: Qwen/Qwen3-8B @ gpu-box:8000');
  });

  it('names files added by hand after the folder they share', () => {
    expect(nameForPaths(['/m/Qwen3-0.6B-Q8_0.gguf'])).toBe('Qwen3-0.6B-Q8_0');
    expect(nameForPaths(['/m/qwen3/a.gguf', '/m/qwen3/st'])).toBe('qwen3');
  });
});
