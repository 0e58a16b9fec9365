// The Benchmark screen's state: the form (the model, its formats, remote engines' models to measure
// beside them, the settings of a run), the run in progress (a row per format or remote model from
// `bench-progress`, cancel), the results on show (a run, or
// two compared), and the history of past runs (open, delete, compare, import, export).
import type { Transport } from '../transport';
import { isHttpPage, pickPaths, pickSavePath, type FileFilter } from '../transport';
import { base64Bytes, downloadFile } from '../download';
import { errorText } from '../errors';
import { remotePath } from '../format';
import type {
  AppSettings,
  BenchBackend,
  BenchDoneEvent,
  BenchErrorEvent,
  BenchExportFormat,
  BenchFormat,
  BenchProgressEvent,
  BenchRequest,
  BenchRunSummary,
  BenchView,
  CatalogueModel,
  FoundModel,
} from '../api';

export interface ProgressRow {
  label: string;
  done: number;
  total: number;
  phase: string;
}

type BenchEvent =
  | { kind: 'progress'; e: BenchProgressEvent }
  | { kind: 'done'; e: BenchDoneEvent }
  | { kind: 'error'; e: BenchErrorEvent };

const MODEL_FILES: FileFilter[] = [{ name: 'Models', extensions: ['gguf', 'safetensors'] }];

export const EXPORTS: { format: BenchExportFormat; name: string; ext: string }[] = [
  { format: 'json', name: 'JSON', ext: 'json' },
  { format: 'csv', name: 'CSV', ext: 'csv' },
  { format: 'markdown', name: 'Markdown', ext: 'md' },
  { format: 'html', name: 'HTML', ext: 'html' },
];

/** "128, 512" → [128, 512]; null unless every entry is a whole number ≥ 1 (and one at least). */
export function parsePromptLengths(text: string): number[] | null {
  const parts = text.split(/[\s,;]+/).filter(Boolean);
  if (!parts.length || !parts.every((p) => /^\d+$/.test(p))) return null;
  const out = parts.map(Number);
  return out.every((n) => n >= 1) ? out : null;
}

/** A whole number ≥ min, or null (fields bound to number inputs can be null or fractional). */
function whole(v: number | null | undefined, min: number): number | null {
  return v != null && Number.isInteger(v) && v >= min ? v : null;
}

/** A name for files added by hand: the folder they share, else the one file's stem. */
export function nameForPaths(paths: string[]): string {
  const split = paths.map((p) => p.split(/[\\/]/).filter(Boolean));
  if (split.length === 1) return (split[0].pop() ?? '').replace(/\.(gguf|safetensors)$/i, '');
  const common: string[] = [];
  for (let i = 0; split.every((s) => i < s.length - 1 && s[i] === split[0][i]); i++) common.push(split[0][i]);
  return common.pop() ?? '';
}

/** A remote model's row, as the service labels it: "remote: <model> @ <host:port>". */
export function remoteLabel(path: string): string {
  const r = remotePath(path);
  return r ? `remote: ${r.model} @ ${r.host}` : `remote: ${path}`;
}

/** "Qwen3 0.6B" → "qwen3-0.6b", for default file names. */
export const slug = (s: string) => s.toLowerCase().replace(/[^a-z0-9.]+/g, '-').replace(/^-|-$/g, '') || 'bench';

export class BenchStore {
  // ---- the form -------------------------------------------------------------------------------
  catalogue = $state<CatalogueModel[]>([]);
  found = $state<FoundModel[]>([]);
  /** What the model select shows: "cat:<id>", "found:<path>", "files" (added by hand), or "". */
  choice = $state('');
  /** The model's name as the run will be listed. */
  model = $state('');
  paths = $state<string[]>([]);
  formats = $state<BenchFormat[]>([]);
  /** Paths of the formats ticked for the run. */
  checked = $state<string[]>([]);
  readingFormats = $state(false);
  /** Remote engines' models (found_models, format "remote"), to measure beside the formats. */
  remoteModels = $state<FoundModel[]>([]);
  /** Paths (`<url>#<model>`) of the remote models ticked for the run; none at first. */
  checkedRemotes = $state<string[]>([]);
  promptText = $state('128,512');
  genTokens = $state<number | null>(128);
  runs = $state<number | null>(3);
  qualityTokens = $state<number | null>(512);
  #backendChoice = $state<BenchBackend | null>(null);

  // ---- the run --------------------------------------------------------------------------------
  job = $state<number | null>(null);
  running = $state(false);
  cancelling = $state(false);
  /** One row per format of the run, then per remote model, in the request's order. */
  progress = $state<ProgressRow[]>([]);

  // ---- results and history ----------------------------------------------------------------------
  view = $state<BenchView | null>(null);
  /** A comparison of two runs has no id of its own, so it cannot be exported. */
  viewKind = $state<'run' | 'compare'>('run');
  history = $state<BenchRunSummary[]>([]);
  /** Ids of the runs ticked for a comparison. */
  picked = $state<number[]>([]);
  error = $state<string | null>(null);
  /** A short note of what just happened (saved where, stopped early). */
  notice = $state<string | null>(null);

  promptTokens = $derived(parsePromptLengths(this.promptText));
  /** The checked formats, in the order bench_formats gave them. */
  selected = $derived(this.formats.filter((f) => this.checked.includes(f.path)));
  /** The ticked remote models, in the order found_models gave them. */
  selectedRemotes = $derived(this.remoteModels.filter((m) => this.checkedRemotes.includes(m.path)));
  request = $derived.by<BenchRequest | null>(() => {
    const [gen, runs, quality] = [whole(this.genTokens, 1), whole(this.runs, 1), whole(this.qualityTokens, 0)];
    if (!this.selected.length && !this.selectedRemotes.length) return null;
    if (!this.promptTokens || gen == null || runs == null || quality == null) return null;
    const name = this.selected.length
      ? nameForPaths(this.selected.map((f) => f.path))
      : this.selectedRemotes.map((m) => m.name).join(' ');
    return {
      model: this.model.trim() || name,
      paths: this.selected.map((f) => f.path),
      backend: this.backend,
      prompt_tokens: this.promptTokens,
      gen_tokens: gen,
      runs,
      quality_tokens: quality,
      remotes: this.selectedRemotes.map((m) => m.path),
    };
  });
  canRun = $derived(!this.running && this.request != null);
  canCompare = $derived(this.picked.length === 2);

  #t: Transport;
  #settings: { readonly settings: AppSettings | null } | null;
  #unlisten: (() => void)[] = [];
  /** Events that came before `start_bench` told us the job's id. */
  #early: BenchEvent[] = [];
  /** Only the latest bench_formats answer counts (choices can change quickly). */
  #formatsSerial = 0;

  /** `settings` gives the default backend: the app's adapter "cpu" → cpu, else auto. */
  constructor(transport: Transport, settings: { readonly settings: AppSettings | null } | null = null) {
    this.#t = transport;
    this.#settings = settings;
  }

  get backend(): BenchBackend {
    return this.#backendChoice ?? (this.#settings?.settings?.adapter === 'cpu' ? 'cpu' : 'auto');
  }
  set backend(v: BenchBackend) {
    this.#backendChoice = v;
  }

  async init(): Promise<void> {
    this.#unlisten = await Promise.all([
      this.#t.listen<BenchProgressEvent>('bench-progress', (e) => this.#onEvent({ kind: 'progress', e })),
      this.#t.listen<BenchDoneEvent>('bench-done', (e) => this.#onEvent({ kind: 'done', e })),
      this.#t.listen<BenchErrorEvent>('bench-error', (e) => this.#onEvent({ kind: 'error', e })),
    ]);
  }

  dispose(): void {
    for (const u of this.#unlisten) u();
    this.#unlisten = [];
  }

  /** The lists the screen needs: catalogue, models on disk, past runs (each on its own). */
  async refresh(): Promise<void> {
    const [catalogue, found] = await Promise.allSettled([
      this.#t.invoke<CatalogueModel[]>('bench_catalogue'),
      this.#t.invoke<FoundModel[]>('found_models'),
      this.refreshHistory(),
    ]);
    if (catalogue.status === 'fulfilled') this.catalogue = catalogue.value;
    else this.error = errorText(catalogue.reason);
    // The catalogue has its own list here; recent models are on disk too.
    // Catalogue models are offered by id above; a remote engine's model has no files, so it is
    // offered apart, measured from its stream beside the formats (ticks kept while it is found).
    if (found.status === 'fulfilled') {
      this.found = found.value.filter((f) => f.source !== 'catalogue' && f.format !== 'remote');
      this.remoteModels = found.value.filter((f) => f.format === 'remote');
      this.checkedRemotes = this.checkedRemotes.filter((p) => this.remoteModels.some((m) => m.path === p));
    }
  }

  async refreshHistory(): Promise<void> {
    try {
      const runs = await this.#t.invoke<BenchRunSummary[]>('bench_runs');
      this.history = runs.slice().sort((a, b) => b.created_at - a.created_at);
      this.picked = this.picked.filter((id) => runs.some((r) => r.id === id));
    } catch (err) {
      this.error = errorText(err);
    }
  }

  // ---- the form -------------------------------------------------------------------------------

  /** Picks the model from the select; its formats are read and all ticked. */
  async choose(choice: string): Promise<void> {
    this.choice = choice;
    let paths: string[] = [];
    if (choice.startsWith('cat:')) {
      const c = this.catalogue.find((m) => `cat:${m.id}` === choice);
      paths = c?.files ?? [];
      this.model = c?.name ?? '';
    } else if (choice.startsWith('found:')) {
      const f = this.found.find((m) => `found:${m.path}` === choice);
      paths = f ? [f.path] : [];
      this.model = f?.name ?? '';
    } else if (choice !== 'files') {
      this.model = '';
    }
    if (choice === 'files') return; // the files stay as they are
    this.paths = paths;
    this.formats = [];
    this.checked = [];
    if (paths.length) await this.#readFormats(paths);
  }

  /** Adds files (several at once where the picker allows) to the formats of the run. */
  async addFiles(): Promise<void> {
    await this.addPaths(await pickPaths({ title: 'Add model files to benchmark', multiple: true, filters: MODEL_FILES }));
  }

  /** Adds model files or folders (picked, or dropped on the screen) to the formats of the run. */
  async addPaths(picked: string[]): Promise<void> {
    const fresh = picked.filter((p) => !this.paths.includes(p));
    if (!fresh.length) return;
    const paths = [...this.paths, ...fresh];
    if (await this.#readFormats(paths)) {
      this.paths = paths;
      this.choice = 'files';
      if (!this.model.trim()) this.model = nameForPaths(paths);
    }
  }

  /** Asks bench_formats; on a refusal the formats shown stay as they were. */
  async #readFormats(paths: string[]): Promise<boolean> {
    const serial = ++this.#formatsSerial;
    this.readingFormats = true;
    this.error = null;
    try {
      const formats = await this.#t.invoke<BenchFormat[]>('bench_formats', { paths });
      if (serial !== this.#formatsSerial) return false;
      const before = new Set(this.formats.map((f) => f.path));
      // New formats come ticked; ones already shown keep the user's tick.
      this.checked = formats.filter((f) => !before.has(f.path) || this.checked.includes(f.path)).map((f) => f.path);
      this.formats = formats;
      return true;
    } catch (err) {
      if (serial === this.#formatsSerial) this.error = errorText(err);
      return false;
    } finally {
      if (serial === this.#formatsSerial) this.readingFormats = false;
    }
  }

  // ---- the run --------------------------------------------------------------------------------

  async start(): Promise<void> {
    const request = this.request;
    if (!request || this.running) return;
    this.error = null;
    this.notice = null;
    this.running = true;
    this.cancelling = false;
    this.job = null;
    this.#early = [];
    this.progress = [...this.selected.map((f) => f.label), ...this.selectedRemotes.map((m) => remoteLabel(m.path))].map(
      (label) => ({ label, done: 0, total: 0, phase: 'waiting' }),
    );
    try {
      const job = await this.#t.invoke<number>('start_bench', { request });
      this.job = job;
      for (const ev of this.#early) this.#onEvent(ev);
    } catch (err) {
      this.running = false;
      this.progress = [];
      this.error = errorText(err);
    } finally {
      this.#early = [];
    }
  }

  /** Asks the service to stop; the run still ends with bench-done (what was measured). */
  async cancel(): Promise<void> {
    if (!this.running) return;
    this.cancelling = true;
    try {
      await this.#t.invoke('cancel_bench');
    } catch (err) {
      this.cancelling = false;
      this.error = errorText(err);
    }
  }

  #onEvent(ev: BenchEvent): void {
    if (!this.running) return;
    if (this.job == null) {
      this.#early.push(ev); // start_bench has not answered yet
      return;
    }
    if (ev.e.job !== this.job) return;
    switch (ev.kind) {
      case 'progress': {
        const { format, label, done, total, phase } = ev.e;
        while (this.progress.length <= format) this.progress.push({ label, done: 0, total: 0, phase: 'waiting' });
        this.progress[format] = { label, done, total, phase };
        return;
      }
      case 'done': {
        this.running = false;
        this.cancelling = false;
        const run = ev.e.run;
        if (run.interrupted) this.notice = 'Stopped early: the results show what was measured before the stop.';
        void this.refreshHistory();
        void this.open(run.id);
        return;
      }
      case 'error':
        this.running = false;
        this.cancelling = false;
        this.error = ev.e.message;
        return;
    }
  }

  // ---- results and history --------------------------------------------------------------------

  async open(id: number): Promise<void> {
    try {
      this.view = await this.#t.invoke<BenchView>('bench_run', { id });
      this.viewKind = 'run';
    } catch (err) {
      this.error = errorText(err);
    }
  }

  closeView(): void {
    this.view = null;
  }

  togglePick(id: number, on: boolean): void {
    this.picked = on ? [...this.picked.filter((p) => p !== id), id] : this.picked.filter((p) => p !== id);
  }

  /** Compares the two picked runs: A is the older, B the newer. */
  async compare(): Promise<void> {
    if (this.picked.length !== 2) return;
    const time = (id: number) => this.history.find((r) => r.id === id)?.created_at ?? 0;
    const [a, b] = this.picked.slice().sort((x, y) => time(x) - time(y));
    try {
      this.view = await this.#t.invoke<BenchView>('compare_bench_runs', { a, b });
      this.viewKind = 'compare';
    } catch (err) {
      this.error = errorText(err);
    }
  }

  async remove(id: number): Promise<void> {
    try {
      await this.#t.invoke('delete_bench_run', { id });
      this.history = this.history.filter((r) => r.id !== id);
      this.picked = this.picked.filter((p) => p !== id);
      if (this.view && this.view.summary.id === id) this.view = null;
    } catch (err) {
      this.error = errorText(err);
    }
  }

  /** Imports a report file (minerva bench's JSON) the user picks. */
  async importReport(): Promise<void> {
    const picked = await pickPaths({ title: 'Import a benchmark report', filters: [{ name: 'JSON', extensions: ['json'] }] });
    await this.importFrom(picked);
  }

  /** Imports report files (picked, or dropped on the screen); the last one imported opens. */
  async importFrom(paths: string[]): Promise<void> {
    for (const path of paths) {
      try {
        const run = await this.#t.invoke<BenchRunSummary>('import_bench_report', { path });
        await this.refreshHistory();
        if (!this.history.some((r) => r.id === run.id)) this.history = [run, ...this.history];
        await this.open(run.id);
      } catch (err) {
        this.error = errorText(err);
        return;
      }
    }
  }

  /**
   * Saves the open run as JSON, CSV, Markdown or HTML where the user says. In a page served over
   * HTTP the JSON report, already in the page, is a browser download (the server saves no
   * files; it says so for the other formats).
   */
  async exportRun(format: BenchExportFormat): Promise<void> {
    const view = this.view;
    const kind = EXPORTS.find((e) => e.format === format);
    if (!view || this.viewKind !== 'run' || !kind) return;
    const name = `${slug(view.summary.model)}-bench.${kind.ext}`;
    if (format === 'json' && isHttpPage()) {
      downloadFile(name, new Blob([JSON.stringify(view.report, null, 2)], { type: 'application/json' }));
      return;
    }
    const path = await pickSavePath(name, [{ name: kind.name, extensions: [kind.ext] }]);
    if (!path) return;
    try {
      await this.#t.invoke('export_bench_run', { id: view.summary.id, format, path });
      this.notice = `Saved ${path}`;
    } catch (err) {
      this.error = errorText(err);
    }
  }

  /** Saves a chart already turned into PNG (base64) where the user says; a download over HTTP. */
  async savePng(defaultName: string, base64: string): Promise<void> {
    if (isHttpPage()) {
      downloadFile(defaultName, new Blob([base64Bytes(base64)], { type: 'image/png' }));
      return;
    }
    const path = await pickSavePath(defaultName, [{ name: 'PNG image', extensions: ['png'] }]);
    if (!path) return;
    try {
      await this.#t.invoke('save_png', { path, base64 });
      this.notice = `Saved ${path}`;
    } catch (err) {
      this.error = errorText(err);
    }
  }
}
