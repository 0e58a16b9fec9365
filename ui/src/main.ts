// Entry point: mounts the app with the transport for this window (Tauri, or the mock service
// in a plain browser).
import { mount } from 'svelte';
import './app.css';
import App from './App.svelte';
import { defaultTransport } from './lib/transport';

const app = mount(App, {
  target: document.getElementById('app')!,
  props: { transport: defaultTransport() },
});

export default app;
