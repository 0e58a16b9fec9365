// The chat screen against the mock service: type, Enter sends, the reply streams in, Stop
// (button and Esc) ends it; Shift+Enter makes a new line.
import { describe, expect, it } from 'vitest';
import { render, waitFor, screen } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import ChatScreen from '../lib/components/ChatScreen.svelte';
import { ChatStore } from '../lib/stores/chat.svelte';
import { createMockTransport } from '../lib/mock';

const REPLY = Array.from({ length: 80 }, (_, i) => `word${i}`).join(' ');

async function setup() {
  const transport = createMockTransport({ tokenDelayMs: 8, prefillMs: 5, replies: [REPLY], reasoning: '' });
  const chat = new ChatStore(transport);
  await chat.init();
  await chat.newConversation('/models/test-1B.gguf');
  const result = render(ChatScreen, { chat, contextSize: 4096 });
  return { chat, ...result, user: userEvent.setup() };
}

const answerText = (c: HTMLElement) => c.querySelector('article.msg.assistant .md')?.textContent?.trim() ?? '';

describe('ChatScreen with the mock service', () => {
  it('sends on Enter, streams the reply in, and Stop ends it', async () => {
    const { chat, container, user } = await setup();
    const box = screen.getByLabelText('Message') as HTMLTextAreaElement;
    await user.type(box, 'Hello there{Enter}');
    expect(box.value).toBe('');
    expect(container.querySelector('article.msg.user')?.textContent).toContain('Hello there');

    await waitFor(() => expect(answerText(container)).toMatch(/word3\b/));
    expect(screen.getByRole('button', { name: 'Stop' })).toBeTruthy();
    await waitFor(() => expect(container.querySelector('.stats')?.textContent).toMatch(/tokens · .*tok\/s/));

    await user.click(screen.getByRole('button', { name: 'Stop' }));
    await waitFor(() => expect(chat.streaming).toBeNull());
    const stopped = answerText(container);
    expect(stopped.length).toBeGreaterThan(0);
    expect(stopped.length).toBeLessThan(REPLY.length);
    await waitFor(() => expect(container.querySelector('.stats')?.textContent).toMatch(/stopped by you/));
    expect(screen.getByRole('button', { name: 'Send' })).toBeTruthy();
    // Nothing more arrives after the stop.
    await new Promise((r) => setTimeout(r, 60));
    expect(answerText(container)).toBe(stopped);
    // The title comes from the first message; the gauge counts the tokens used.
    await waitFor(() => expect(container.querySelector('header h1')?.textContent).toBe('Hello there'));
    expect(container.querySelector('[role="meter"]')?.getAttribute('aria-valuenow')).not.toBe('0');
  });

  it('Esc stops the reply', async () => {
    const { chat, container, user } = await setup();
    await user.type(screen.getByLabelText('Message'), 'Hi{Enter}');
    await waitFor(() => expect(answerText(container)).toMatch(/word2\b/));
    await user.keyboard('{Escape}');
    await waitFor(() => expect(chat.streaming).toBeNull());
    expect(chat.messages[1].stats?.stop_reason).toBe('cancelled');
  });

  it('Shift+Enter makes a new line instead of sending', async () => {
    const { chat, user } = await setup();
    const box = screen.getByLabelText('Message') as HTMLTextAreaElement;
    await user.type(box, 'line one{Shift>}{Enter}{/Shift}line two');
    expect(box.value).toBe('line one\nline two');
    expect(chat.messages).toHaveLength(0);
  });

  it('lets the whole reply finish, then regenerates it', async () => {
    const { chat, container, user } = await setup();
    await user.type(screen.getByLabelText('Message'), 'Hi{Enter}');
    await waitFor(() => expect(chat.streaming).toBeNull(), { timeout: 3000 });
    expect(answerText(container)).toBe(REPLY);
    const firstId = chat.messages[1].id;
    await user.click(screen.getByRole('button', { name: 'Regenerate' }));
    await waitFor(() => expect(chat.streaming).toBeNull(), { timeout: 3000 });
    expect(chat.messages).toHaveLength(2);
    expect(chat.messages[1].id).not.toBe(firstId);
    expect(container.querySelectorAll('article.msg.assistant')).toHaveLength(1);
  });
});
