// The whole window against the mock service: open a model (picker), see its card, load it with
// a progress bar, land in a chat; a file that is not a model gives a plain-words error and the
// app stays usable; one-click Load from a list; the Benchmark and Settings tabs (Ctrl+3, Ctrl+4).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { render, screen, waitFor } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import App from '../App.svelte';
import { createMockTransport } from '../lib/mock';

afterEach(() => vi.unstubAllGlobals());

function setup() {
  const transport = createMockTransport({ loadTickMs: 5, tokenDelayMs: 2, prefillMs: 2 });
  const result = render(App, { transport });
  return { ...result, user: userEvent.setup() };
}

describe('App with the mock service', () => {
  it('opens a model, shows its card, loads it with progress and moves to the chat', async () => {
    const { container, user } = setup();
    vi.stubGlobal('prompt', () => '/models/Qwen3-1.7B-Q4_K_M.gguf');
    await user.click(screen.getByRole('button', { name: 'Open file…' }));
    const card = await screen.findByRole('region', { name: 'Qwen3-1.7B-Q4_K_M.gguf' });
    expect(card.textContent).toContain('qwen3');
    expect(card.textContent).toContain('1.7B');
    expect(card.textContent).toContain('Q4_K ×169');
    expect(card.textContent).toMatch(/Chat template\s*yes/);
    expect(card.querySelector('.fit')?.textContent).toBe('fits');

    await user.click(screen.getByRole('button', { name: 'Load' }));
    await waitFor(() => expect(container.querySelector('progress')).not.toBeNull());
    expect(screen.getByRole('button', { name: 'Cancel' })).toBeTruthy();
    // Done: the app opens a new chat with the model, and the status bar names it.
    await waitFor(() => expect(screen.getByLabelText('Message')).toBeTruthy(), { timeout: 3000 });
    await waitFor(() => expect(screen.getByLabelText('Status').textContent).toContain('Qwen3-1.7B-Q4_K_M'));
    expect(screen.getByLabelText('Status').textContent).toContain('Mock GPU (Vulkan)');
  });

  it('says in plain words when a file is not a model, and stays usable', async () => {
    const { user } = setup();
    vi.stubGlobal('prompt', () => '/home/me/notes.txt');
    await user.click(screen.getByRole('button', { name: 'Open file…' }));
    const alert = await screen.findByRole('alert');
    expect(alert.textContent).toMatch(/is not a model Minerva can read/);
    await user.click(screen.getByRole('button', { name: 'Dismiss this message' }));
    expect(screen.queryByRole('alert')).toBeNull();
    // The lists are there and a model loads in one click.
    await user.click(await screen.findByRole('button', { name: 'Load Qwen3 0.6B' }));
    await waitFor(() => expect(screen.getByLabelText('Status').textContent).toContain('Qwen3 0.6B'), { timeout: 3000 });
  });

  it('cancels a load', async () => {
    const { user } = setup();
    await user.click(await screen.findByRole('button', { name: 'Load Llama 3.2 1B Instruct' }));
    await user.click(await screen.findByRole('button', { name: 'Cancel' }));
    expect(await screen.findByText(/Cancelled loading/)).toBeTruthy();
    await new Promise((r) => setTimeout(r, 150));
    expect(screen.getByLabelText('Status').textContent).toContain('No model loaded');
  });

  it('switches to Benchmark with Ctrl+3 and Settings with Ctrl+4; a theme picked there applies', async () => {
    const { user } = setup();
    await user.keyboard('{Control>}3{/Control}');
    expect(await screen.findByRole('heading', { name: 'Benchmark' })).toBeTruthy();
    expect(screen.getByRole('button', { name: 'Benchmark' }).getAttribute('aria-current')).toBe('page');
    expect(await screen.findByRole('complementary', { name: 'Past runs' })).toBeTruthy();
    await user.keyboard('{Control>}4{/Control}');
    await user.click(await screen.findByRole('radio', { name: 'Light' }));
    expect(document.documentElement.dataset.theme).toBe('light');
    await user.click(screen.getByRole('radio', { name: 'Like the system' }));
    expect(document.documentElement.hasAttribute('data-theme')).toBe(false);
    await user.click(screen.getByRole('button', { name: 'Models' }));
    expect(screen.getByRole('button', { name: 'Open file…' })).toBeTruthy();
  });
});
