// Svelte compiler options: TypeScript in components through Vite's preprocessor; runes everywhere.
import { vitePreprocess } from '@sveltejs/vite-plugin-svelte';

export default {
  preprocess: vitePreprocess(),
  compilerOptions: { runes: true },
};
