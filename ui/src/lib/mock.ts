// An in-memory fake of the Minerva service behind the Transport interface: models to find,
// open and load (with progress), remote engines and their models, conversations and messages,
// replies streamed token by token with setTimeout, the app's settings, and benchmarks
// (mock-bench.ts). Used by the tests and by `npm run dev` in a plain browser.
import type { Transport } from './transport';
import { createBenchMock } from './mock-bench';
import {
  DEFAULT_SETTINGS,
  type AppSettings,
  type ChatEvent,
  type Conversation,
  type FoundModel,
  type Id,
  type LoadedModel,
  type Message,
  type ModelCard,
  type ModelFormat,
  type RemoteEngine,
  type Settings,
  type Stats,
  type StopReason,
} from './api';

export interface MockOptions {
  /** Milliseconds between two streamed tokens. */
  tokenDelayMs?: number;
  /** Milliseconds before the first token (the "prefill"). */
  prefillMs?: number;
  /** Milliseconds between two load-progress events (20 of them make a load). */
  loadTickMs?: number;
  /** The answers the fake model gives, in turn. */
  replies?: string[];
  /** The reasoning shown before each answer ('' for none). */
  reasoning?: string;
  /** Milliseconds between two bench-progress events. */
  benchTickMs?: number;
}

export const CANNED_REASONING =
  'The user wants a short example. A small function with a test shows the idea best; ' +
  'I will keep it under twenty lines and explain each step briefly.';

export const CANNED_REPLIES = [
  `Here is a small **Rust** function that sums the squares of a slice:

\`\`\`rust
fn sum_squares(xs: &[f32]) -> f32 {
    xs.iter().map(|x| x * x).sum()
}

#[test]
fn squares() {
    assert_eq!(sum_squares(&[1.0, 2.0, 3.0]), 14.0);
}
\`\`\`

How it works:

1. \`iter()\` walks the slice without copying it.
2. \`map\` squares each element.
3. \`sum\` adds them up, starting from \`0.0\`.

| input | output |
|---|---|
| \`[1, 2, 3]\` | 14 |
| \`[]\` | 0 |

That is all — *iterators* compile to the same loop you would write by hand.`,
  `Another way, with an explicit loop:

\`\`\`python
def sum_squares(xs):
    total = 0.0
    for x in xs:
        total += x * x
    return total
\`\`\`

Both run in linear time; pick whichever reads better to you.`,
];

const FOUND: FoundModel[] = [
  { path: '/home/me/models/SmolLM2-135M-Instruct-Q8_0.gguf', name: 'SmolLM2 135M Instruct Q8_0', format: 'gguf', bytes: 144_800_000, source: 'recent' },
  { path: 'catalogue:qwen3-0.6b', name: 'Qwen3 0.6B', format: 'safetensors', bytes: 1_503_000_000, source: 'catalogue' },
  { path: 'catalogue:llama-3.2-1b-instruct', name: 'Llama 3.2 1B Instruct', format: 'gguf', bytes: 807_700_000, source: 'catalogue' },
  { path: '/home/me/.cache/lm-studio/models/Qwen3-1.7B-Q4_K_M.gguf', name: 'Qwen3 1.7B Q4_K_M', format: 'gguf', bytes: 1_107_000_000, source: 'lmstudio' },
  { path: '/home/me/.cache/huggingface/hub/models--mlx-community--Qwen3-0.6B-4bit', name: 'mlx-community/Qwen3-0.6B-4bit', format: 'mlx', bytes: 335_000_000, source: 'hf-cache' },
  { path: '/home/me/.ollama/models/blobs/sha256-6a0746a1ec1a', name: 'llama3.2:1b', format: 'gguf', bytes: 1_321_000_000, source: 'ollama' },
];

function formatOf(path: string): ModelFormat | null {
  const p = path.toLowerCase();
  if (p.endsWith('.gguf') || p.includes('ollama')) return 'gguf';
  if (p.includes('mlx')) return 'mlx';
  if (p.endsWith('.safetensors')) return 'safetensors';
  const last = p.split(/[\\/]/).pop() ?? '';
  if (p.startsWith('catalogue:')) return 'safetensors';
  if (last && !last.includes('.')) return 'safetensors'; // a folder
  return null;
}

function parametersOf(path: string): number {
  const m = /(\d+(?:\.\d+)?)\s*([bm])\b/i.exec(path.replace(/[-_]/g, ' '));
  if (!m) return 1.1e9;
  return parseFloat(m[1]) * (m[2].toLowerCase() === 'b' ? 1e9 : 1e6);
}

function nameOf(path: string): string {
  const found = FOUND.find((f) => f.path === path);
  if (found) return found.name;
  return (path.split(/[\\/]/).pop() ?? path).replace(/\.(gguf|safetensors)$/i, '');
}

/** The models a fake remote engine serves, by its port (any other port: the first list). */
const REMOTE_MODELS: Record<string, string[]> = {
  '8000': ['Qwen/Qwen3-8B', 'meta-llama/Llama-3.1-8B-Instruct'],
  '8080': ['gemma-3-4b-it'],
};

/**
 * "gpu-box:8000/" → "http://gpu-box:8000/v1", as the service normalizes an engine's URL; throws
 * the service's words for what is not a URL.
 */
export function normalizeEngineUrl(raw: string): string {
  let text = raw.trim();
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(text)) text = `http://${text}`;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw `"${raw}" is not a URL: expected something like http://gpu-box:8000/v1.`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw `"${raw}" is not an http:// or https:// URL.`;
  const path = url.pathname.replace(/\/+$/, '');
  return `${url.protocol}//${url.host}${path.endsWith('/v1') ? path : `${path}/v1`}`;
}

/** Splits text into token-sized pieces: words with their leading space, punctuation, newlines. */
export function mockTokens(text: string): string[] {
  return text.match(/\n|[ \t]*[A-Za-z0-9_']+|[ \t]*[^\sA-Za-z0-9_']|[ \t]+/g) ?? [];
}

interface Generation {
  conversation_id: Id;
  message_id: Id;
  timer: ReturnType<typeof setTimeout> | null;
  started: number;
  firstAt: number | null;
  generated: number;
  promptTokens: number;
  finish: (reason: StopReason) => void;
}

export function createMockTransport(options: MockOptions = {}): Transport {
  const tokenDelayMs = options.tokenDelayMs ?? 25;
  const prefillMs = options.prefillMs ?? 150;
  const loadTickMs = options.loadTickMs ?? 60;
  const replies = options.replies ?? CANNED_REPLIES;
  const reasoning = options.reasoning ?? CANNED_REASONING;
  const benchTickMs = options.benchTickMs ?? 120;

  const handlers = new Map<string, Set<(payload: unknown) => void>>();
  const emit = (event: string, payload: unknown) => {
    for (const h of [...(handlers.get(event) ?? [])]) h(payload);
  };

  let nextId = 1;
  const id = () => nextId++;
  const now = () => Date.now();
  const loaded: LoadedModel[] = [];
  const conversations: Conversation[] = [];
  const messages: Message[] = [];
  const loads = new Map<Id, ReturnType<typeof setInterval>>();
  const remotes: RemoteEngine[] = [];
  /** `<url>#<model>` of a remote engine's model, or null when no engine added serves it. */
  const remoteOf = (path: string) => {
    const hash = path.indexOf('#');
    const engine = hash < 0 ? undefined : remotes.find((r) => r.url === path.slice(0, hash));
    const model = path.slice(hash + 1);
    return engine && engine.models.includes(model) ? { url: engine.url, model } : null;
  };
  const generations = new Map<Id, Generation>();
  let replyTurn = 0;
  let appSettings: AppSettings = {
    adapter: 'auto',
    default_ctx: null,
    model_folders: ['/home/me/models'],
    data_folder: '/home/me/.local/share/minerva',
    theme: 'system',
  };

  const conversation = (cid: Id) => {
    const c = conversations.find((x) => x.id === cid);
    if (!c) throw `There is no conversation ${cid}.`;
    return c;
  };

  function card(path: string): ModelCard {
    const format = formatOf(path);
    if (!format) {
      throw `"${path}" is not a model Minerva can read: expected a .gguf file, a .safetensors file, or a folder holding config.json and safetensors weights.`;
    }
    const parameters = parametersOf(path);
    const q4 = format !== 'safetensors';
    const weights = Math.round(parameters * (q4 ? 0.56 : 2));
    const kv = 4096 * 2 * 28 * 1024 * 2;
    return {
      path,
      format,
      architecture: /qwen/i.test(path) ? 'qwen3' : 'llama',
      parameters,
      dtypes: q4 ? { Q4_K: 169, Q6_K: 28, F32: 113 } : { BF16: 197, F32: 113 },
      context_length: 32768,
      chat_template: true,
      file_bytes: weights + 2_000_000,
      memory: {
        weights_bytes: weights,
        kv_bytes: kv,
        ctx: 4096,
        available_bytes: /huge|70b/i.test(path) ? 8e9 : 24e9,
        device: 'CPU (24 GiB RAM)',
        fits: weights + kv < (/huge|70b/i.test(path) ? 8e9 : 24e9) ? 'yes' : 'no',
      },
    };
  }

  function generate(conversation_id: Id, message_id: Id) {
    const conv = conversation(conversation_id);
    const reply = replies[replyTurn++ % replies.length];
    const pieces: { kind: 'reasoning' | 'text'; text: string }[] = [
      ...mockTokens(reasoning).map((text) => ({ kind: 'reasoning' as const, text })),
      ...mockTokens(reply).map((text) => ({ kind: 'text' as const, text })),
    ];
    const max = conv.settings.max_tokens;
    const promptTokens = messages
      .filter((m) => m.conversation_id === conversation_id)
      .reduce((n, m) => n + mockTokens(m.content).length, 0);
    const gen: Generation = {
      conversation_id,
      message_id,
      timer: null,
      started: now(),
      firstAt: null,
      generated: 0,
      promptTokens,
      finish: (reason) => {
        if (gen.timer) clearTimeout(gen.timer);
        generations.delete(conversation_id);
        conv.tokens_used = promptTokens + gen.generated;
        conv.updated_at = now();
        const stats = statsOf(gen, reason);
        const msg = messages.find((m) => m.id === message_id);
        if (msg) msg.stats = stats;
        emit('chat', { conversation_id, message_id, kind: 'stats', stats } satisfies ChatEvent);
        emit('chat', { conversation_id, message_id, kind: 'done' } satisfies ChatEvent);
      },
    };
    generations.set(conversation_id, gen);
    let i = 0;
    const step = () => {
      gen.timer = null;
      if (i >= pieces.length) return gen.finish('stop');
      if (gen.generated >= max) return gen.finish('max_tokens');
      const piece = pieces[i++];
      gen.firstAt ??= now();
      gen.generated++;
      const msg = messages.find((m) => m.id === message_id);
      if (msg) {
        if (piece.kind === 'text') msg.content += piece.text;
        else msg.reasoning = (msg.reasoning ?? '') + piece.text;
      }
      emit('chat', { conversation_id, message_id, kind: piece.kind, text: piece.text } satisfies ChatEvent);
      if (gen.generated % 16 === 0) {
        emit('chat', { conversation_id, message_id, kind: 'stats', stats: statsOf(gen, 'stop') } satisfies ChatEvent);
      }
      gen.timer = setTimeout(step, tokenDelayMs);
    };
    gen.timer = setTimeout(step, prefillMs);
  }

  function statsOf(gen: Generation, reason: StopReason): Stats {
    const t = now();
    const ttft = (gen.firstAt ?? t) - gen.started;
    const decodeS = Math.max(1e-3, (t - (gen.firstAt ?? t)) / 1000);
    return {
      prompt_tokens: gen.promptTokens,
      generated_tokens: gen.generated,
      time_to_first_token_ms: ttft,
      prefill_tokens_per_s: gen.promptTokens / Math.max(1e-3, ttft / 1000),
      decode_tokens_per_s: gen.generated > 1 ? (gen.generated - 1) / decodeS : 0,
      stop_reason: reason,
    };
  }

  function addAssistant(conversation_id: Id): Id {
    const msg: Message = {
      id: id(),
      conversation_id,
      role: 'assistant',
      content: '',
      reasoning: reasoning ? '' : null,
      stats: null,
      created_at: now(),
    };
    messages.push(msg);
    return msg.id;
  }

  function dropAfter(conversation_id: Id, index: number) {
    const later = messages.filter((m, i) => m.conversation_id === conversation_id && i > index);
    for (const m of later) messages.splice(messages.indexOf(m), 1);
  }

  const busy = (cid: Id) => {
    if (generations.has(cid)) throw 'A reply is still being written in this conversation.';
  };

  type Args = Record<string, any>;
  const commands: Record<string, (a: Args) => unknown> = {
    open_model: ({ path }) => {
      if (remoteOf(String(path ?? ''))) throw "A remote engine's model has no card: load it from the list of remote models.";
      return card(String(path ?? ''));
    },
    load_model: ({ path, backend, ctx }) => {
      const remote = remoteOf(String(path ?? ''));
      if (remote) {
        // Nothing to read from disk: no progress, only the engine's answer.
        const load_id = `load-${id()}`;
        const timer = setTimeout(() => {
          loads.delete(load_id);
          const model: LoadedModel = {
            id: id(),
            path,
            name: remote.model,
            backend: 'remote',
            adapter: remote.url,
            load_ms: loadTickMs,
            ctx: ctx ?? 4096,
          };
          loaded.splice(0, loaded.length, model);
          emit('load-done', { load_id, model });
        }, loadTickMs);
        loads.set(load_id, timer);
        return { load_id };
      }
      card(path);
      const load_id = `load-${id()}`;
      const total = card(path).memory.weights_bytes;
      let bytes = 0;
      const timer = setInterval(() => {
        bytes = Math.min(total, bytes + total / 20);
        if (/fail/i.test(path) && bytes > total / 3) {
          clearInterval(timer);
          loads.delete(load_id);
          emit('load-error', { load_id, message: `Could not load ${nameOf(path)}: the file ends early (truncated at ${Math.round(bytes)} bytes).` });
          return;
        }
        emit('load-progress', { load_id, bytes, total });
        if (bytes >= total) {
          clearInterval(timer);
          loads.delete(load_id);
          const model: LoadedModel = {
            id: id(),
            path,
            name: nameOf(path),
            backend: backend === 'cpu' ? 'cpu' : 'gpu',
            adapter: backend === 'cpu' ? null : 'Mock GPU (Vulkan)',
            load_ms: loadTickMs * 20,
            ctx: ctx ?? 4096,
          };
          loaded.splice(0, loaded.length, model); // one model at a time
          emit('load-done', { load_id, model });
        }
      }, loadTickMs);
      loads.set(load_id, timer);
      return { load_id };
    },
    cancel_load: ({ load_id }) => {
      const t = loads.get(load_id);
      // (clearInterval clears a remote load's setTimeout too: they share one id space)
      if (t) clearInterval(t);
      loads.delete(load_id);
      return null;
    },
    unload_model: ({ id: mid }) => {
      const i = loaded.findIndex((m) => m.id === mid);
      if (i >= 0) loaded.splice(i, 1);
      return null;
    },
    adapters: () => [
      { name: 'Mock GPU', description: 'Mock GPU (Vulkan, driver mock 1.0), 24 GiB', software: false, memory_bytes: 24 * 2 ** 30 },
    ],
    loaded_models: () => loaded.slice(),
    found_models: () => [
      ...FOUND,
      ...remotes.flatMap((r) =>
        r.models.map((m): FoundModel => ({ path: `${r.url}#${m}`, name: m, format: 'remote', bytes: 0, source: 'remote' })),
      ),
    ],
    add_remote_engine: ({ url, api_key }) => {
      const normalized = normalizeEngineUrl(String(url ?? ''));
      const host = new URL(normalized).hostname;
      // Hosts named "down…" never answer; hosts named "secure…" want the key "secret".
      if (/^down/i.test(host)) throw `Could not reach ${normalized}: connection refused.`;
      if (/^secure/i.test(host) && api_key !== 'secret') {
        throw `${normalized} refused the API key (401 Unauthorized): check the key the engine was started with.`;
      }
      const port = new URL(normalized).port;
      const engine: RemoteEngine = { url: normalized, models: (REMOTE_MODELS[port] ?? REMOTE_MODELS['8000']).slice(), error: null };
      const i = remotes.findIndex((r) => r.url === normalized);
      if (i >= 0) remotes[i] = engine;
      else remotes.push(engine);
      return { url: engine.url, models: engine.models.slice() };
    },
    remove_remote_engine: ({ url }) => {
      const i = remotes.findIndex((r) => r.url === url);
      if (i >= 0) remotes.splice(i, 1);
      return null;
    },
    remote_engines: () => remotes.map((r) => ({ ...r, models: r.models.slice() })),
    catalogue_problems: () => [],
    list_conversations: ({ query } = {}) => {
      const q = String(query ?? '').trim().toLowerCase();
      return conversations
        .filter((c) => !q || c.title.toLowerCase().includes(q))
        .sort((a, b) => Number(b.updated_at) - Number(a.updated_at))
        .map((c) => ({ ...c, settings: { ...c.settings } }));
    },
    create_conversation: ({ model_path, settings }) => {
      const c: Conversation = {
        id: id(),
        title: 'New chat',
        model_path: model_path ?? null,
        settings: { ...DEFAULT_SETTINGS, ...(settings as Partial<Settings> | undefined) },
        created_at: now(),
        updated_at: now(),
        tokens_used: 0,
      };
      conversations.push(c);
      return { ...c, settings: { ...c.settings } };
    },
    rename_conversation: ({ id: cid, title }) => {
      conversation(cid).title = String(title);
      return null;
    },
    delete_conversation: ({ id: cid }) => {
      generations.get(cid)?.finish('cancelled');
      conversations.splice(conversations.indexOf(conversation(cid)), 1);
      for (let i = messages.length - 1; i >= 0; i--) if (messages[i].conversation_id === cid) messages.splice(i, 1);
      return null;
    },
    get_messages: ({ conversation_id }) =>
      messages.filter((m) => m.conversation_id === conversation_id).map((m) => ({ ...m })),
    send_message: ({ conversation_id, text }) => {
      const conv = conversation(conversation_id);
      busy(conversation_id);
      if (!loaded.length && !conv.model_path) throw 'No model is loaded: load one on the Models screen first.';
      messages.push({ id: id(), conversation_id, role: 'user', content: String(text), reasoning: null, stats: null, created_at: now() });
      if (conv.title === 'New chat') conv.title = String(text).split('\n')[0].slice(0, 40) || 'New chat';
      const message_id = addAssistant(conversation_id);
      generate(conversation_id, message_id);
      return { message_id };
    },
    regenerate: ({ conversation_id }) => {
      busy(conversation_id);
      const mine = messages.filter((m) => m.conversation_id === conversation_id);
      const last = mine[mine.length - 1];
      if (!last) throw 'There is nothing to regenerate yet.';
      if (last.role === 'assistant') messages.splice(messages.indexOf(last), 1);
      const message_id = addAssistant(conversation_id);
      generate(conversation_id, message_id);
      return { message_id };
    },
    edit_message: ({ message_id, text }) => {
      const i = messages.findIndex((m) => m.id === message_id);
      if (i < 0 || messages[i].role !== 'user') throw 'Only your own messages can be edited.';
      const cid = messages[i].conversation_id;
      busy(cid);
      messages[i].content = String(text);
      dropAfter(cid, i);
      const newId = addAssistant(cid);
      generate(cid, newId);
      return { message_id: newId };
    },
    stop: ({ conversation_id }) => {
      generations.get(conversation_id)?.finish('cancelled');
      return null;
    },
    update_settings: ({ conversation_id, settings }) => {
      conversation(conversation_id).settings = { ...(settings as Settings) };
      return null;
    },
    status: () => ({
      model: loaded[0] ?? null,
      // A remote engine's model takes no memory here.
      memory_used_bytes: loaded.length && loaded[0].backend !== 'remote' ? card(loaded[0].path).memory.weights_bytes : null,
    }),
    app_settings: () => ({ ...appSettings, model_folders: appSettings.model_folders.slice() }),
    set_app_settings: ({ settings }) => {
      const s = settings as AppSettings;
      if (s.default_ctx != null && !(Number.isInteger(s.default_ctx) && s.default_ctx >= 256)) {
        throw 'The default context length must be a whole number of at least 256 tokens.';
      }
      // The data folder is the service's to say (MINERVA_DB): what the UI sends is ignored.
      appSettings = { ...s, model_folders: [...new Set(s.model_folders)], data_folder: appSettings.data_folder };
      return { ...appSettings, model_folders: appSettings.model_folders.slice() };
    },
    ...createBenchMock(emit, benchTickMs, (url) => remotes.some((r) => r.url === url)),
  };

  return {
    async invoke<T>(command: string, args?: object): Promise<T> {
      const run = commands[command];
      if (!run) throw `The service has no command "${command}".`;
      await Promise.resolve();
      return run((args ?? {}) as Args) as T;
    },
    async listen<T>(event: string, handler: (payload: T) => void): Promise<() => void> {
      let set = handlers.get(event);
      if (!set) handlers.set(event, (set = new Set()));
      const h = handler as (payload: unknown) => void;
      set.add(h);
      return () => set.delete(h);
    },
  };
}

/** The shared mock used by `npm run dev` outside Tauri. */
export const mockTransport: Transport = createMockTransport();
