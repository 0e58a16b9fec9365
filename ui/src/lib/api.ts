// TypeScript mirrors of the Rust service's JSON (snake_case, as serde writes it): models,
// remote engines, conversations, messages, stats, settings, benchmarks, the app's settings, and
// the payloads of its commands and events.

/** Ids as the service sends them (SQLite rowids or strings: compared with ===, never parsed). */
export type Id = number | string;
/** Times as the service sends them: Unix milliseconds or an ISO 8601 string (fed to `new Date`). */
export type Timestamp = number | string;

export type ModelFormat = 'gguf' | 'safetensors' | 'mlx';
export type Fit = 'yes' | 'no' | 'unknown';

export interface MemoryEstimate {
  weights_bytes: number;
  kv_bytes: number;
  ctx: number;
  available_bytes: number | null;
  device: string;
  fits: Fit;
}

export interface ModelCard {
  path: string;
  format: ModelFormat;
  architecture: string;
  parameters: number;
  /** dtype name → tensor count, e.g. { "Q4_K": 193, "F32": 65 } */
  dtypes: Record<string, number>;
  context_length: number;
  chat_template: boolean;
  file_bytes: number;
  memory: MemoryEstimate;
}

export type ModelSource =
  | 'recent'
  | 'catalogue'
  | 'lmstudio'
  | 'hf-cache'
  | 'llamacpp'
  | 'ollama'
  | 'jan'
  | 'dropped'
  | 'remote';

/**
 * A model found on disk, in the catalogue, or served by a remote engine: then its path is
 * `<engine url>#<model id>`, its format "remote", its bytes 0, and it has no card.
 */
export interface FoundModel {
  path: string;
  name: string;
  format: ModelFormat | 'remote';
  bytes: number;
  source: ModelSource;
}

/** An OpenAI-compatible server (vLLM, llama.cpp's server, another Minerva) used as a model source. */
export interface RemoteEngine {
  /** As the service normalized it, e.g. "http://127.0.0.1:8081/v1". */
  url: string;
  models: string[];
  /** Why it cannot be reached now, in words; null when it answers. */
  error: string | null;
}

/** A GPU adapter a model can be loaded on by name. */
export interface Adapter {
  name: string;
  /** "name (API, driver …)", and ", 80 GiB" where the driver tells the card's memory */
  description: string;
  software: boolean;
  /** The card's memory where its driver tells it (NVML on NVIDIA), else null. */
  memory_bytes: number | null;
}

export interface LoadedModel {
  id: Id;
  path: string;
  name: string;
  backend: 'cpu' | 'gpu' | 'remote';
  /** The adapter's name; a remote engine's url. */
  adapter: string | null;
  load_ms: number;
  ctx: number;
}

export interface Settings {
  system_prompt: string;
  temperature: number;
  top_p: number;
  top_k: number;
  min_p: number;
  repeat_penalty: number;
  seed: number | null;
  max_tokens: number;
  ctx: number;
  /** "auto" | "cpu" | an adapter name */
  backend: string;
}

export interface Conversation {
  id: Id;
  title: string;
  model_path: string | null;
  settings: Settings;
  created_at: Timestamp;
  updated_at: Timestamp;
  tokens_used: number;
}

export type Role = 'system' | 'user' | 'assistant';
export type StopReason = 'stop' | 'max_tokens' | 'cancelled' | 'context_full' | 'error';

export interface Stats {
  prompt_tokens: number;
  generated_tokens: number;
  time_to_first_token_ms: number;
  prefill_tokens_per_s: number;
  decode_tokens_per_s: number;
  stop_reason: StopReason;
}

export interface Message {
  id: Id;
  conversation_id: Id;
  role: Role;
  content: string;
  reasoning: string | null;
  stats: Stats | null;
  created_at: Timestamp;
}

export interface Status {
  model: LoadedModel | null;
  memory_used_bytes: number | null;
}

// ---- events -------------------------------------------------------------------------------

export interface LoadProgressEvent {
  load_id: Id;
  bytes: number;
  total: number;
}
export interface LoadDoneEvent {
  load_id: Id;
  model: LoadedModel;
}
export interface LoadErrorEvent {
  load_id: Id;
  message: string;
}

export type ChatEventKind = 'text' | 'reasoning' | 'stats' | 'done' | 'error';
/** One `chat` event; text and reasoning deltas are batched at the source every ~16–33 ms. */
export interface ChatEvent {
  conversation_id: Id;
  message_id: Id;
  kind: ChatEventKind;
  text?: string;
  stats?: Stats;
  message?: string;
}

// ---- benchmarks (one model's formats side by side) -----------------------------------------

/** A catalogue model (models.toml) with the files of it found on disk. */
export interface CatalogueModel {
  id: string;
  name: string;
  files: string[];
}

/** One format of a model to benchmark, as `bench_formats` reads it from the paths given. */
export interface BenchFormat {
  path: string;
  /** Names the format and its quantization, e.g. "gguf Q8_0", "mlx 4bit". */
  label: string;
  format: ModelFormat;
  bytes: number;
}

export type BenchBackend = 'auto' | 'gpu' | 'cpu';

/** What `start_bench` runs (its fields stay snake_case inside the `request` argument). */
export interface BenchRequest {
  model: string;
  paths: string[];
  backend: BenchBackend;
  prompt_tokens: number[];
  gen_tokens: number;
  runs: number;
  quality_tokens: number;
  /**
   * Remote engines' models measured beside the formats, as `<engine url>#<model id>` (their
   * found models' paths): speed from the stream, no load time or memory.
   */
  remotes: string[];
}

export interface BenchRunSummary {
  id: number;
  /** Unix milliseconds. */
  created_at: number;
  model: string;
  backend: string;
  device: string;
  /** The formats' labels. */
  formats: string[];
  /** Cancelled before the end: the figures are what was measured until then. */
  interrupted: boolean;
  /** Came from a report file (`import_bench_report`), not a run on this machine. */
  imported: boolean;
}

/** One figure: a column of the table, and a chart. */
export interface BenchColumn {
  title: string;
  short: string;
  unit: string;
  better: 'higher' | 'lower';
}

export interface BenchRow {
  /** A format's label, or a remote model's ("remote: <model> @ <host:port>"). */
  label: string;
  /** The format the quality figures are measured against. */
  reference: boolean;
  /** Formatted already, one per column; null = not measured. */
  cells: (string | null)[];
}

/** A run (or two compared) as the screen shows it: the Rust side did the sums and the words. */
export interface BenchView {
  summary: BenchRunSummary;
  /** The raw JSON report, as written to disk. */
  report: unknown;
  columns: BenchColumn[];
  rows: BenchRow[];
  /** SVG markup, one chart per column, in the columns' order. */
  charts: string[];
  /** Plain-words conclusions, one per line. */
  verdicts: string[];
}

export type BenchExportFormat = 'json' | 'csv' | 'markdown' | 'html';

export interface BenchProgressEvent {
  job: number;
  /** Index of the format in the request's paths; a remote model's is paths.length + its index. */
  format: number;
  /** A remote model's reads "remote: <model> @ <host:port>". */
  label: string;
  done: number;
  total: number;
  phase: string;
}
/** Ends every run, a cancelled one too (its summary says `interrupted`). */
export interface BenchDoneEvent {
  job: number;
  run: BenchRunSummary;
}
export interface BenchErrorEvent {
  job: number;
  message: string;
}

// ---- the app's settings ---------------------------------------------------------------------

export type Theme = 'system' | 'light' | 'dark';

export interface AppSettings {
  /** "auto" | "cpu" | an adapter name */
  adapter: string;
  /** Context length for new loads; null = the model's default. */
  default_ctx: number | null;
  /** Folders scanned for models, besides the known apps' folders. */
  model_folders: string[];
  /** Where the database and reports live (read-only here; MINERVA_DB overrides it). */
  data_folder: string;
  theme: Theme;
}

/** Event names → payloads, so `listen` can be typed by name. */
export interface EventMap {
  'load-progress': LoadProgressEvent;
  'load-done': LoadDoneEvent;
  'load-error': LoadErrorEvent;
  chat: ChatEvent;
  'bench-progress': BenchProgressEvent;
  'bench-done': BenchDoneEvent;
  'bench-error': BenchErrorEvent;
}

export const DEFAULT_SETTINGS: Settings = {
  system_prompt: '',
  temperature: 0.7,
  top_p: 0.95,
  top_k: 40,
  min_p: 0.05,
  repeat_penalty: 1.1,
  seed: null,
  max_tokens: 1024,
  ctx: 4096,
  backend: 'auto',
};
