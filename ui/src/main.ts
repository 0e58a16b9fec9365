// Entry point: applies the theme remembered from last time (before the first paint; the
// service's settings confirm it once loaded) and mounts the app with the transport for this
// window (Tauri, or the mock service in a plain browser).
import { mount } from 'svelte';
import './app.css';
import App from './App.svelte';
import { defaultTransport } from './lib/transport';
import { applyTheme, THEME_KEY } from './lib/stores/app-settings.svelte';
import type { Theme } from './lib/api';

try {
  const remembered = localStorage.getItem(THEME_KEY);
  if (remembered === 'light' || remembered === 'dark') applyTheme(remembered as Theme);
} catch {
  // no storage: the system's theme shows until the settings load
}

const app = mount(App, {
  target: document.getElementById('app')!,
  props: { transport: defaultTransport() },
});

export default app;
