// Rendering a message: reasoning folded above the answer, the stats line, code blocks with a
// copy button that says "Copied" only when copying worked, and sanitized model output.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { render, fireEvent, waitFor } from '@testing-library/svelte';
import MessageView from '../lib/components/MessageView.svelte';
import { ChatStore } from '../lib/stores/chat.svelte';
import type { Message } from '../lib/api';
import { fakeTransport } from './fake';

const chat = () => new ChatStore(fakeTransport().transport);

const reply = (over: Partial<Message> = {}): Message => ({
  id: 5,
  conversation_id: 1,
  role: 'assistant',
  content: 'The **answer**.\n\n```js\nconst x = 1;\n```',
  reasoning: 'First I consider the question.',
  stats: {
    prompt_tokens: 12,
    generated_tokens: 42,
    time_to_first_token_ms: 180,
    prefill_tokens_per_s: 300,
    decode_tokens_per_s: 25,
    stop_reason: 'stop',
  },
  created_at: 0,
  ...over,
});

afterEach(() => vi.unstubAllGlobals());

describe('MessageView', () => {
  it('shows the reasoning folded, above the answer', () => {
    const { container } = render(MessageView, { message: reply(), chat: chat() });
    const details = container.querySelector('details.reasoning') as HTMLDetailsElement;
    expect(details).not.toBeNull();
    expect(details.open).toBe(false);
    expect(details.querySelector('summary')?.textContent).toBe('Reasoning');
    expect(details.textContent).toContain('First I consider the question.');
    const answer = container.querySelector('.md')!;
    expect(details.compareDocumentPosition(answer) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();
    expect(answer.querySelector('strong')?.textContent).toBe('answer');
  });

  it('splits inline <think> reasoning too', () => {
    const { container } = render(MessageView, {
      message: reply({ reasoning: null, content: '<think>Hidden steps</think>Visible answer' }),
      chat: chat(),
    });
    expect(container.querySelector('details.reasoning')?.textContent).toContain('Hidden steps');
    expect(container.querySelector('.md')?.textContent?.trim()).toBe('Visible answer');
  });

  it('shows the stats line under the reply, live while streaming', async () => {
    const { container, rerender } = render(MessageView, { message: reply(), chat: chat() });
    expect(container.querySelector('.stats')?.textContent).toBe('42 tokens · TTFT 180 ms · 25.0 tok/s');
    await rerender({ message: reply({ stats: null }), chat: chat(), streaming: true, live: { tokens: 10, perS: 20, estimated: true, ttftMs: 150 } });
    expect(container.querySelector('.stats')?.textContent).toBe('≈10 tokens · ≈20.0 tok/s · TTFT 150 ms');
  });

  it('removes script and event handlers from model output', () => {
    const { container } = render(MessageView, {
      message: reply({ content: 'ok <img src=x onerror="window.pwned=1"><script>window.pwned=2</script>' }),
      chat: chat(),
    });
    expect(container.querySelector('script')).toBeNull();
    expect(container.querySelector('[onerror]')).toBeNull();
    expect((window as unknown as { pwned?: number }).pwned).toBeUndefined();
  });

  it('highlights code and copies it, saying "Copied" only after it worked', async () => {
    const writeText = vi.fn().mockResolvedValue(undefined);
    vi.stubGlobal('navigator', { ...navigator, clipboard: { writeText } });
    const { container } = render(MessageView, { message: reply(), chat: chat() });
    expect(container.querySelector('code.language-js .hljs-keyword')?.textContent).toBe('const');
    const button = container.querySelector('button.copy-code') as HTMLButtonElement;
    expect(button.textContent).toBe('Copy');
    await fireEvent.click(button);
    await waitFor(() => expect(button.textContent).toBe('Copied'));
    expect(writeText).toHaveBeenCalledWith('const x = 1;');
  });

  it('falls back to execCommand, and says so when copying failed', async () => {
    vi.stubGlobal('navigator', { ...navigator, clipboard: { writeText: vi.fn().mockRejectedValue(new Error('denied')) } });
    const exec = vi.fn().mockReturnValue(false);
    document.execCommand = exec;
    const { container } = render(MessageView, { message: reply(), chat: chat() });
    const button = container.querySelector('button.copy-code') as HTMLButtonElement;
    await fireEvent.click(button);
    await waitFor(() => expect(button.textContent).toBe('Copy failed'));
    expect(exec).toHaveBeenCalledWith('copy');
    exec.mockReturnValue(true);
    const again = render(MessageView, { message: reply({ id: 6 }), chat: chat() });
    const button2 = again.container.querySelector('button.copy-code') as HTMLButtonElement;
    await fireEvent.click(button2);
    await waitFor(() => expect(button2.textContent).toBe('Copied'));
  });

  it('does not re-render finished blocks while a reply streams', async () => {
    const c = chat();
    const msg = reply({ content: 'Para one.\n\nPara', stats: null, reasoning: null });
    const { container, rerender } = render(MessageView, { message: msg, chat: c, streaming: true });
    const first = container.querySelector('.md p');
    await rerender({ message: { ...msg, content: 'Para one.\n\nPara two is longer' }, chat: c, streaming: true });
    const ps = container.querySelectorAll('.md p');
    expect(ps[0]).toBe(first);
    expect(ps[1].textContent).toBe('Para two is longer');
  });
});
