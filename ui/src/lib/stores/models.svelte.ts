// The models state: the opened model's card, the load in progress (bytes, cancel, errors in
// plain words), the loaded models, the models found on disk, in the catalogue and on remote
// engines (added and removed here), and the service status (loaded model, memory in use) the
// status bar shows.
import type { Transport } from '../transport';
import { errorText } from '../errors';
import type {
  Adapter,
  FoundModel,
  Id,
  LoadDoneEvent,
  LoadErrorEvent,
  LoadProgressEvent,
  LoadedModel,
  ModelCard,
  RemoteEngine,
  Status,
} from '../api';

export type LoadPhase = 'starting' | 'loading' | 'done' | 'error' | 'cancelled';

export interface LoadState {
  load_id: Id | null;
  path: string;
  bytes: number;
  total: number;
  phase: LoadPhase;
  error: string | null;
}

type LoadEvent =
  | { kind: 'progress'; e: LoadProgressEvent }
  | { kind: 'done'; e: LoadDoneEvent }
  | { kind: 'error'; e: LoadErrorEvent };

const FOUND_ON_DISK = new Set(['lmstudio', 'hf-cache', 'llamacpp', 'ollama', 'jan', 'dropped']);

export class ModelsStore {
  card = $state<ModelCard | null>(null);
  opening = $state(false);
  /** The last thing that went wrong, in plain words; the app stays usable. */
  error = $state<string | null>(null);
  found = $state<FoundModel[]>([]);
  /** A line per bad entry of the catalogue files (`file:line: what`). */
  catalogueProblems = $state<string[]>([]);
  loaded = $state<LoadedModel[]>([]);
  load = $state<LoadState | null>(null);
  status = $state<Status>({ model: null, memory_used_bytes: null });
  /** Load options: "auto" | "cpu" | "gpu" | an adapter name, and the context size. */
  backend = $state('auto');
  /** GPU adapters that can be named as the backend. */
  adapters = $state<Adapter[]>([]);
  ctx = $state(4096);
  /** OpenAI-compatible servers whose models are offered beside the local ones. */
  remotes = $state<RemoteEngine[]>([]);
  addingRemote = $state(false);

  recent = $derived(this.found.filter((f) => f.source === 'recent'));
  catalogue = $derived(this.found.filter((f) => f.source === 'catalogue'));
  onDisk = $derived(this.found.filter((f) => FOUND_ON_DISK.has(f.source)));
  remote = $derived(this.found.filter((f) => f.source === 'remote'));
  busy = $derived(this.load?.phase === 'starting' || this.load?.phase === 'loading');

  /** Called when a load finishes (the app opens a chat with the model). */
  onLoaded: ((m: LoadedModel) => void) | null = null;

  #t: Transport;
  #unlisten: (() => void)[] = [];
  /** Events that came before `load_model` told us its id. */
  #early = new Map<Id, LoadEvent[]>();
  #cancelWanted = false;

  constructor(transport: Transport) {
    this.#t = transport;
  }

  async init(): Promise<void> {
    this.#unlisten = await Promise.all([
      this.#t.listen<LoadProgressEvent>('load-progress', (e) => this.#onLoadEvent({ kind: 'progress', e })),
      this.#t.listen<LoadDoneEvent>('load-done', (e) => this.#onLoadEvent({ kind: 'done', e })),
      this.#t.listen<LoadErrorEvent>('load-error', (e) => this.#onLoadEvent({ kind: 'error', e })),
    ]);
    await Promise.all([this.refresh(), this.#loadAdapters()]);
  }

  async #loadAdapters(): Promise<void> {
    try {
      this.adapters = await this.#t.invoke<Adapter[]>('adapters');
    } catch {
      this.adapters = []; // auto, gpu and cpu still work
    }
  }

  dispose(): void {
    for (const u of this.#unlisten) u();
    this.#unlisten = [];
  }

  async refresh(): Promise<void> {
    try {
      const [loaded, found] = await Promise.all([
        this.#t.invoke<LoadedModel[]>('loaded_models'),
        this.#t.invoke<FoundModel[]>('found_models'),
      ]);
      this.loaded = loaded;
      this.found = found;
      this.catalogueProblems = await this.#t.invoke<string[]>('catalogue_problems');
    } catch (err) {
      this.error = errorText(err);
    }
    await Promise.all([this.refreshStatus(), this.#refreshRemotes()]);
  }

  async #refreshRemotes(): Promise<void> {
    try {
      this.remotes = await this.#t.invoke<RemoteEngine[]>('remote_engines');
    } catch {
      // the local models still work; the list keeps what it showed
    }
  }

  /** Adds an OpenAI-compatible server as a model source; false (and the error shown) when refused. */
  async addRemote(url: string, apiKey = ''): Promise<boolean> {
    url = url.trim();
    apiKey = apiKey.trim();
    if (!url || this.addingRemote) return false;
    this.addingRemote = true;
    this.error = null;
    try {
      await this.#t.invoke<RemoteEngine>('add_remote_engine', apiKey ? { url, api_key: apiKey } : { url });
      await this.refresh(); // its models join the found ones
      return true;
    } catch (err) {
      this.error = errorText(err);
      return false;
    } finally {
      this.addingRemote = false;
    }
  }

  async removeRemote(url: string): Promise<void> {
    this.error = null;
    try {
      await this.#t.invoke('remove_remote_engine', { url });
      this.remotes = this.remotes.filter((r) => r.url !== url);
    } catch (err) {
      this.error = errorText(err);
    }
    await this.refresh();
  }

  /** A found model's name was clicked: its card; a remote model has none, so it loads. */
  async openFound(m: FoundModel): Promise<void> {
    if (m.format === 'remote') await this.startLoad(m.path);
    else await this.open(m.path);
  }

  async refreshStatus(): Promise<void> {
    try {
      this.status = await this.#t.invoke<Status>('status');
    } catch {
      // the status bar keeps its last numbers
    }
  }

  /** Reads a model's card (a file or folder path); errors are shown, not thrown. */
  async open(path: string): Promise<ModelCard | null> {
    this.opening = true;
    this.error = null;
    try {
      const card = await this.#t.invoke<ModelCard>('open_model', { path });
      this.card = card;
      this.ctx = Math.min(card.memory.ctx || 4096, card.context_length || Infinity);
      void this.refresh(); // it is a recent model now
      return card;
    } catch (err) {
      this.error = errorText(err);
      return null;
    } finally {
      this.opening = false;
    }
  }

  closeCard(): void {
    this.card = null;
  }

  /** Starts loading; progress, the end and errors come as events. */
  async startLoad(path: string): Promise<void> {
    if (this.busy) return;
    this.error = null;
    this.#cancelWanted = false;
    this.load = { load_id: null, path, bytes: 0, total: 0, phase: 'starting', error: null };
    try {
      const { load_id } = await this.#t.invoke<{ load_id: Id }>('load_model', { path, backend: this.backend, ctx: this.ctx });
      const load = this.load;
      if (!load || load.path !== path || load.load_id != null) return;
      load.load_id = load_id;
      if (this.#cancelWanted) {
        await this.#t.invoke('cancel_load', { load_id });
        return;
      }
      load.phase = 'loading';
      for (const ev of this.#early.get(load_id) ?? []) this.#onLoadEvent(ev);
    } catch (err) {
      if (this.load?.path === path) {
        this.load.phase = 'error';
        this.load.error = errorText(err);
      }
      this.error = errorText(err);
    } finally {
      this.#early.clear();
    }
  }

  async cancel(): Promise<void> {
    const load = this.load;
    if (!load || !this.busy) return;
    if (load.load_id == null) {
      this.#cancelWanted = true; // sent as soon as the service names the load
      load.phase = 'cancelled';
      return;
    }
    load.phase = 'cancelled';
    try {
      await this.#t.invoke('cancel_load', { load_id: load.load_id });
    } catch (err) {
      this.error = errorText(err);
    }
  }

  dismissLoad(): void {
    if (!this.busy) this.load = null;
  }

  async unload(id: Id): Promise<void> {
    try {
      await this.#t.invoke('unload_model', { id });
      this.loaded = this.loaded.filter((m) => m.id !== id);
    } catch (err) {
      this.error = errorText(err);
    }
    await this.refreshStatus();
  }

  #onLoadEvent(ev: LoadEvent): void {
    const load = this.load;
    if (!load) return;
    if (load.load_id == null) {
      // The service may speak before load_model returns: keep the events for when it does.
      if (load.phase === 'starting' || load.phase === 'cancelled') {
        const list = this.#early.get(ev.e.load_id) ?? [];
        list.push(ev);
        this.#early.set(ev.e.load_id, list);
      }
      return;
    }
    if (ev.e.load_id !== load.load_id || load.phase === 'cancelled') return;
    if (load.phase !== 'loading') return;
    switch (ev.kind) {
      case 'progress':
        load.bytes = ev.e.bytes;
        load.total = ev.e.total;
        return;
      case 'done': {
        load.phase = 'done';
        load.bytes = load.total = Math.max(load.total, load.bytes);
        const model = ev.e.model;
        this.loaded = [model, ...this.loaded.filter((m) => m.id !== model.id && m.path !== model.path)];
        void this.refresh();
        this.onLoaded?.(model);
        return;
      }
      case 'error':
        load.phase = 'error';
        load.error = ev.e.message;
        return;
    }
  }
}
