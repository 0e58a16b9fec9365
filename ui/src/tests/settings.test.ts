// The app's settings: the store saves each change and applies the theme to <html> (a refused
// save goes back), and the Settings screen used like a person would: theme, adapter, context,
// folders added and removed.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { render, screen, waitFor, within } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import SettingsScreen from '../lib/components/SettingsScreen.svelte';
import { AppSettingsStore, applyTheme } from '../lib/stores/app-settings.svelte';
import type { AppSettings } from '../lib/api';
import { createMockTransport } from '../lib/mock';
import { fakeTransport, recordingTransport } from './fake';

const root = document.documentElement;
afterEach(() => {
  vi.unstubAllGlobals();
  delete root.dataset.theme;
});

const SAVED: AppSettings = {
  adapter: 'auto',
  default_ctx: null,
  model_folders: ['/models'],
  data_folder: '/home/me/.local/share/minerva',
  theme: 'dark',
};

describe('app settings store', () => {
  it('applies the saved theme at start, saves a change and applies it at once', async () => {
    const fake = fakeTransport({
      app_settings: () => ({ ...SAVED }),
      adapters: () => [{ name: 'GPU A', description: 'GPU A (Vulkan)', software: false, memory_bytes: null }],
      set_app_settings: ({ settings }: { settings: AppSettings }) => settings,
    });
    const store = new AppSettingsStore(fake.transport);
    await store.init();
    expect(root.dataset.theme).toBe('dark');
    expect(store.adapters.map((a) => a.name)).toEqual(['GPU A']);

    const saving = store.update({ theme: 'light' });
    expect(root.dataset.theme).toBe('light'); // before the service answers
    await saving;
    expect(fake.called('set_app_settings')[0].args).toEqual({ settings: { ...SAVED, theme: 'light' } });
    expect(store.settings?.theme).toBe('light');

    await store.update({ theme: 'system' });
    expect(root.dataset.theme).toBeUndefined();
    expect(root.hasAttribute('data-theme')).toBe(false);
  });

  it('goes back to what was saved when the service refuses a change', async () => {
    const fake = fakeTransport({
      app_settings: () => ({ ...SAVED }),
      set_app_settings: () => Promise.reject('The settings file is read-only.'),
    });
    const store = new AppSettingsStore(fake.transport);
    await store.init();
    await store.update({ theme: 'light', default_ctx: 8192 });
    expect(store.error).toBe('The settings file is read-only.');
    expect(store.settings).toEqual(SAVED);
    expect(root.dataset.theme).toBe('dark');
  });

  it('applyTheme sets and clears data-theme', () => {
    const el = document.createElement('div');
    applyTheme('dark', el);
    expect(el.dataset.theme).toBe('dark');
    applyTheme('system', el);
    expect(el.hasAttribute('data-theme')).toBe(false);
  });
});

describe('Settings screen with the mock service', () => {
  async function setup() {
    const rec = recordingTransport(createMockTransport());
    const store = new AppSettingsStore(rec.transport);
    await store.init();
    render(SettingsScreen, { store });
    return { ...rec, store, user: userEvent.setup() };
  }

  it('switches the theme at once and saves it', async () => {
    const { user, store, called } = await setup();
    expect(root.hasAttribute('data-theme')).toBe(false);
    await user.click(screen.getByRole('radio', { name: 'Dark' }));
    expect(root.dataset.theme).toBe('dark');
    await waitFor(() => expect(store.saving).toBe(false));
    expect(called('set_app_settings').at(-1)?.args.settings.theme).toBe('dark');
    await user.click(screen.getByRole('radio', { name: 'Like the system' }));
    expect(root.hasAttribute('data-theme')).toBe(false);
  });

  it('offers auto, cpu and each adapter; saves the adapter and the context length', async () => {
    const { user, store } = await setup();
    const select = screen.getByLabelText(/GPU adapter/) as HTMLSelectElement;
    expect(within(select).getAllByRole('option').map((o) => o.getAttribute('value'))).toEqual(['auto', 'cpu', 'Mock GPU']);
    expect(within(select).getByRole('option', { name: 'Mock GPU (Vulkan, driver mock 1.0), 24 GiB' })).toBeTruthy();
    await user.selectOptions(select, 'Mock GPU');
    await waitFor(() => expect(store.settings?.adapter).toBe('Mock GPU'));

    const ctx = screen.getByLabelText(/Default context length/) as HTMLInputElement;
    await user.type(ctx, '8192');
    await user.tab();
    await waitFor(() => expect(store.settings?.default_ctx).toBe(8192));
    await user.clear(ctx);
    await user.tab();
    await waitFor(() => expect(store.settings?.default_ctx).toBeNull());
    // Refused by the service: the error shows and the field shows what is saved.
    await user.type(ctx, '100');
    await user.tab();
    expect((await screen.findByRole('alert')).textContent).toMatch(/at least 256/);
    expect(ctx.value).toBe('');
  });

  it('adds a folder through the picker and removes one; the data folder is read-only', async () => {
    const { user, store } = await setup();
    vi.stubGlobal('prompt', () => '/mnt/big/models');
    await user.click(screen.getByRole('button', { name: 'Add folder…' }));
    await waitFor(() => expect(store.settings?.model_folders).toEqual(['/home/me/models', '/mnt/big/models']));
    expect(screen.getByText('/mnt/big/models')).toBeTruthy();
    await user.click(screen.getByRole('button', { name: 'Remove /home/me/models' }));
    await waitFor(() => expect(store.settings?.model_folders).toEqual(['/mnt/big/models']));
    const data = screen.getByLabelText('Data folder') as HTMLInputElement;
    expect(data.readOnly).toBe(true);
    expect(data.value).toBe('/home/me/.local/share/minerva');
    expect(screen.getByText(/MINERVA_DB/, { selector: 'code' })).toBeTruthy();
  });
});
