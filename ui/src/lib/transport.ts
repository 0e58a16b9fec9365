// The one door between the UI and the service: the Transport interface, its Tauri and HTTP
// implementations, the in-memory mock (re-exported from mock.ts), and the platform helpers the
// UI needs besides commands and events: dropped paths, the open pickers and the save picker.
import { invoke as tauriInvoke } from '@tauri-apps/api/core';
import { listen as tauriListen } from '@tauri-apps/api/event';
import { getCurrentWebview } from '@tauri-apps/api/webview';
import { open as tauriOpen, save as tauriSave } from '@tauri-apps/plugin-dialog';
import { mockTransport } from './mock';

export { mockTransport, createMockTransport } from './mock';

/** Commands go out with `invoke`; events come back through `listen`. Nothing else. */
export interface Transport {
  invoke<T>(command: string, args?: object): Promise<T>;
  /** Resolves to the function that stops listening. */
  listen<T>(event: string, handler: (payload: T) => void): Promise<() => void>;
}

/** True inside the Tauri shell (its script defines this global before ours runs). */
export function isTauri(): boolean {
  return typeof window !== 'undefined' && '__TAURI_INTERNALS__' in window;
}

/**
 * The app's Rust side has one generic command, `call`, that runs any command of the service's
 * table by name: the same table `minerva serve --ui` answers over HTTP.
 */
export const tauriTransport: Transport = {
  invoke<T>(command: string, args?: object): Promise<T> {
    return tauriInvoke<T>('call', { command, args: args ?? {} });
  },
  async listen<T>(event: string, handler: (payload: T) => void): Promise<() => void> {
    return tauriListen<T>(event, (e) => handler(e.payload));
  },
};

/** True when `minerva serve --ui` served this page (it adds `<meta name="minerva-transport" content="http">`). */
export function isHttpPage(): boolean {
  if (typeof document === 'undefined') return false;
  return document.querySelector('meta[name="minerva-transport"]')?.getAttribute('content') === 'http';
}

/**
 * The transport for this window: Tauri in the app, HTTP in a page `minerva serve --ui` served,
 * the mock in a plain browser (the vite dev server).
 */
export function defaultTransport(): Transport {
  if (isTauri()) return tauriTransport;
  if (isHttpPage()) return httpTransport();
  return mockTransport;
}

/** Where the API key of a server that asks for one is kept for this tab. */
export const API_KEY_STORAGE = 'minerva-api-key';

function storedKey(): string | null {
  try {
    return sessionStorage.getItem(API_KEY_STORAGE);
  } catch {
    return null; // storage refused: the key lives in memory only
  }
}

function storeKey(key: string | null): void {
  try {
    if (key) sessionStorage.setItem(API_KEY_STORAGE, key);
    else sessionStorage.removeItem(API_KEY_STORAGE);
  } catch {
    // storage refused: the key lives in memory only
  }
}

/** The words of a refused call: the server's `{"error": {"message"}}`, else its status text. */
async function refusal(res: Response): Promise<string> {
  const text = await res.text().catch(() => '');
  try {
    const message = JSON.parse(text)?.error?.message;
    if (typeof message === 'string' && message) return message;
  } catch {
    // not JSON: a proxy's page, say
  }
  return res.statusText || `The server answered ${res.status}.`;
}

/**
 * Commands and events over HTTP, for a browser talking to `minerva serve --ui`: a command is a
 * POST to `/api/call/<command>` with the arguments as its JSON body; events come on one shared
 * server-sent event stream, `/api/events`, named as the Tauri events are, with the same payloads.
 * A server started with an API key answers 401 until the user types it (asked once, kept for
 * the tab in sessionStorage).
 */
export function httpTransport(base = ''): Transport {
  let key = storedKey();
  /** The prompt on screen, shared by the calls refused while it is up. */
  let asking: Promise<string | null> | null = null;
  /** The user cancelled the prompt: asking again on every status poll would nag. */
  let declined = false;

  function askKey(): Promise<string | null> {
    asking ??= Promise.resolve().then(() => {
      const typed = window.prompt('This Minerva server needs its API key')?.trim() || null;
      if (typed) setKey(typed);
      else declined = true;
      asking = null;
      return typed;
    });
    return asking;
  }

  function setKey(next: string | null): void {
    if (next === key) return;
    key = next;
    storeKey(next);
    // An open event stream was opened with the old key (or none): open it again with this one.
    if (source) reopen();
  }

  function post(command: string, args: object | undefined, withKey: string | null): Promise<Response> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (withKey) headers.authorization = `Bearer ${withKey}`;
    return fetch(`${base}/api/call/${encodeURIComponent(command)}`, {
      method: 'POST',
      headers,
      body: JSON.stringify(args ?? {}),
    }).catch((err: unknown) => {
      // The browser's own words ("Failed to fetch") do not say what could not be reached.
      throw new Error(`Could not reach the Minerva server (${err instanceof Error ? err.message : String(err)}).`);
    });
  }

  // ---- events: one EventSource for every listener --------------------------------------

  interface Entry {
    event: string;
    listener: (e: MessageEvent) => void;
  }
  const entries = new Set<Entry>();
  let source: EventSource | null = null;

  function open(): EventSource {
    const es = new EventSource(`${base}/api/events${key ? `?api_key=${encodeURIComponent(key)}` : ''}`);
    for (const { event, listener } of entries) es.addEventListener(event, listener as EventListener);
    return es;
  }

  function reopen(): void {
    source?.close();
    source = open();
  }

  return {
    async invoke<T>(command: string, args?: object): Promise<T> {
      const sentKey = key;
      let res = await post(command, args, sentKey);
      if (res.status === 401) {
        // Another call may have learned the key meanwhile; else ask (once) for it.
        const next = key !== sentKey ? key : declined ? null : await askKey();
        if (next) {
          res = await post(command, args, next);
          // A wrong key is not sent again: the next refused call asks anew.
          if (res.status === 401 && key === next) setKey(null);
        }
      }
      if (!res.ok) throw new Error(await refusal(res));
      const text = await res.text();
      return (text ? JSON.parse(text) : null) as T;
    },

    async listen<T>(event: string, handler: (payload: T) => void): Promise<() => void> {
      const entry: Entry = {
        event,
        listener: (e) => {
          let payload: T;
          try {
            payload = JSON.parse(e.data) as T;
          } catch {
            return; // not an event of ours
          }
          handler(payload);
        },
      };
      entries.add(entry);
      if (source) source.addEventListener(event, entry.listener as EventListener);
      else source = open();
      return () => {
        if (!entries.delete(entry)) return;
        source?.removeEventListener(event, entry.listener as EventListener);
        if (entries.size === 0) {
          source?.close();
          source = null;
        }
      };
    },
  };
}

export type DropEvent =
  | { type: 'enter'; paths: string[] }
  | { type: 'over' }
  | { type: 'drop'; paths: string[] }
  | { type: 'leave' };

/**
 * Files and folders dragged onto the window, as absolute paths (Tauri's webview drag-drop
 * events; WebKitGTK gives no File objects). Outside Tauri no paths come (the browser gives none); it only stops a drop from opening the file in place of the app.
 */
export async function onDropPaths(handler: (e: DropEvent) => void): Promise<() => void> {
  if (!isTauri()) return keepBrowserFromOpeningDrops();
  return getCurrentWebview().onDragDropEvent((event) => {
    const p = event.payload;
    if (p.type === 'enter' || p.type === 'drop') handler({ type: p.type, paths: p.paths });
    else handler({ type: p.type });
  });
}

/**
 * Asks the user for a model file or folder; null when cancelled. Tauri's dialog plugin in the
 * app; a prompt for a path in a plain browser (the mock service accepts any path).
 */
export async function pickPath(directory: boolean): Promise<string | null> {
  if (isTauri()) {
    const picked = await tauriOpen({
      directory,
      multiple: false,
      title: directory ? 'Open a model folder' : 'Open a model file',
      filters: directory ? undefined : [{ name: 'Models', extensions: ['gguf', 'safetensors'] }],
    });
    return typeof picked === 'string' ? picked : null;
  }
  const typed = window.prompt(directory ? 'Path of a model folder' : 'Path of a model file');
  return typed && typed.trim() ? typed.trim() : null;
}

/** A file type offered by the pickers: "JSON" → ["json"]. */
export interface FileFilter {
  name: string;
  extensions: string[];
}

export interface PickOptions {
  title: string;
  directory?: boolean;
  multiple?: boolean;
  filters?: FileFilter[];
}

/**
 * Asks the user for one or several files or folders; [] when cancelled. In a plain browser a
 * prompt takes the path (several separated by ";", when `multiple`).
 */
export async function pickPaths(opts: PickOptions): Promise<string[]> {
  if (isTauri()) {
    const picked = await tauriOpen({
      directory: opts.directory ?? false,
      multiple: opts.multiple ?? false,
      title: opts.title,
      filters: opts.directory ? undefined : opts.filters,
    });
    if (picked == null) return [];
    return Array.isArray(picked) ? picked : [picked];
  }
  const typed = window.prompt(opts.multiple ? `${opts.title} (separate several with ;)` : opts.title);
  if (!typed) return [];
  const parts = opts.multiple ? typed.split(';') : [typed];
  return parts.map((p) => p.trim()).filter(Boolean);
}

/**
 * Asks where to save a file, offering `defaultName`; null when cancelled. Tauri's save dialog in
 * the app; a prompt for a path in a plain browser.
 */
export async function pickSavePath(defaultName: string, filters: FileFilter[] = []): Promise<string | null> {
  if (isTauri()) {
    return tauriSave({ title: 'Save as', defaultPath: defaultName, filters: filters.length ? filters : undefined });
  }
  const typed = window.prompt('Save as (a path)', defaultName);
  return typed && typed.trim() ? typed.trim() : null;
}

/** In a plain browser, a file dropped on the page would replace the app with that file. */
function keepBrowserFromOpeningDrops(): () => void {
  if (typeof window === 'undefined') return () => {};
  const stop = (e: DragEvent) => e.preventDefault();
  window.addEventListener('dragover', stop);
  window.addEventListener('drop', stop);
  return () => {
    window.removeEventListener('dragover', stop);
    window.removeEventListener('drop', stop);
  };
}
