// Vite + Vitest configuration for Minerva's web UI (build to ui/dist, tests in jsdom).
import { defineConfig } from 'vitest/config';
import { svelte } from '@sveltejs/vite-plugin-svelte';
import { svelteTesting } from '@testing-library/svelte/vite';

export default defineConfig({
  plugins: [svelte(), svelteTesting()],
  // Tauri serves the bundle from its own origin: relative asset paths work there and over HTTP.
  base: './',
  clearScreen: false,
  server: { port: 5173, strictPort: true },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // WebKitGTK on older distros: stay at a target it understands.
    target: ['es2022', 'safari16'],
    sourcemap: false,
  },
  test: {
    environment: 'jsdom',
    include: ['src/**/*.test.ts'],
    setupFiles: ['src/tests/setup.ts'],
    benchmark: { include: ['bench/**/*.bench.ts'] },
  },
});
