// The app's settings as the service keeps them (GPU adapter, default context, folders to scan,
// data folder, theme): loaded at start, saved on each change, and the theme applied to the page.
import type { Transport } from '../transport';
import { errorText } from '../errors';
import type { Adapter, AppSettings, Theme } from '../api';

/** Remembers the last theme so main.ts can apply it before the first paint (no flash). */
export const THEME_KEY = 'minerva-theme';

/**
 * Shows `theme` at once: `data-theme` on the root element overrides the system's choice in
 * app.css; "system" removes it so prefers-color-scheme decides again.
 */
export function applyTheme(theme: Theme, root: HTMLElement = document.documentElement): void {
  if (theme === 'light' || theme === 'dark') root.dataset.theme = theme;
  else delete root.dataset.theme;
  try {
    localStorage.setItem(THEME_KEY, theme);
  } catch {
    // no storage (private mode, tests): the theme still applies once the settings load
  }
}

export class AppSettingsStore {
  /** null until the service answers. */
  settings = $state<AppSettings | null>(null);
  /** GPU adapters that can be named as the default. */
  adapters = $state<Adapter[]>([]);
  error = $state<string | null>(null);
  saving = $state(false);

  /** Called after a save the service accepted, with what it saved and what was before. */
  onSaved: ((saved: AppSettings, before: AppSettings) => void) | null = null;

  #t: Transport;
  #root: HTMLElement | undefined;
  /** Only the answer to the latest save is kept (saves can overlap when fields change fast). */
  #serial = 0;

  constructor(transport: Transport, root?: HTMLElement) {
    this.#t = transport;
    this.#root = root;
  }

  async init(): Promise<void> {
    const [settings, adapters] = await Promise.allSettled([
      this.#t.invoke<AppSettings>('app_settings'),
      this.#t.invoke<Adapter[]>('adapters'),
    ]);
    if (settings.status === 'fulfilled') {
      this.settings = settings.value;
      applyTheme(settings.value.theme, this.#root);
    } else {
      this.error = errorText(settings.reason);
    }
    this.adapters = adapters.status === 'fulfilled' ? adapters.value : []; // auto and cpu still work
  }

  /** Saves a change; the page shows it at once, and goes back to what was saved if refused. */
  async update(patch: Partial<AppSettings>): Promise<void> {
    const before = this.settings;
    if (!before) return;
    const wanted: AppSettings = { ...before, ...patch };
    this.settings = wanted;
    applyTheme(wanted.theme, this.#root);
    const serial = ++this.#serial;
    this.saving = true;
    this.error = null;
    try {
      const saved = await this.#t.invoke<AppSettings>('set_app_settings', { settings: wanted });
      if (serial !== this.#serial) return;
      this.settings = saved;
      applyTheme(saved.theme, this.#root);
      this.onSaved?.(saved, before);
    } catch (err) {
      if (serial !== this.#serial) return;
      this.error = errorText(err);
      this.settings = before;
      applyTheme(before.theme, this.#root);
    } finally {
      if (serial === this.#serial) this.saving = false;
    }
  }

  async addFolder(path: string): Promise<void> {
    const folders = this.settings?.model_folders ?? [];
    if (!path || folders.includes(path)) return;
    await this.update({ model_folders: [...folders, path] });
  }

  async removeFolder(path: string): Promise<void> {
    await this.update({ model_folders: (this.settings?.model_folders ?? []).filter((f) => f !== path) });
  }
}
