// The one door between the UI and the service: the Transport interface, its Tauri
// implementation, the in-memory mock (re-exported from mock.ts), and the platform helpers the
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

export const tauriTransport: Transport = {
  invoke<T>(command: string, args?: object): Promise<T> {
    return tauriInvoke<T>(command, args as Record<string, unknown> | undefined);
  },
  async listen<T>(event: string, handler: (payload: T) => void): Promise<() => void> {
    return tauriListen<T>(event, (e) => handler(e.payload));
  },
};

/** The transport for this window: Tauri in the app, the mock in a plain browser dev server. */
export function defaultTransport(): Transport {
  return isTauri() ? tauriTransport : mockTransport;
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
