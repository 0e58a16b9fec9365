// A long conversation stays fast: while a reply streams, the older messages' DOM is not touched
// at all (watched with a MutationObserver), and the reply's DOM grows once per frame.
import { describe, expect, it } from 'vitest';
import { render } from '@testing-library/svelte';
import { flushSync } from 'svelte';
import MessageList from '../lib/components/MessageList.svelte';
import { ChatStore } from '../lib/stores/chat.svelte';
import { ManualFrames } from '../lib/frame';
import type { Message } from '../lib/api';
import { fakeTransport } from './fake';

const history: Message[] = Array.from({ length: 12 }, (_, i) => ({
  id: i + 1,
  conversation_id: 1,
  role: i % 2 ? 'assistant' : 'user',
  content: i % 2 ? `Answer ${i} with \`code\` and a list:\n\n- a\n- b\n\n\`\`\`js\nlet x = ${i};\n\`\`\`` : `Question ${i}`,
  reasoning: null,
  stats: null,
  created_at: 0,
}));

describe('MessageList', () => {
  it('does not touch older messages while a reply streams', async () => {
    const fake = fakeTransport({
      list_conversations: () => [],
      get_messages: () => history,
      send_message: () => ({ message_id: 100 }),
    });
    const frames = new ManualFrames();
    const chat = new ChatStore(fake.transport, { frames });
    await chat.init();
    await chat.select(1);
    const { container } = render(MessageList, { chat });
    await chat.send('One more question');
    flushSync();

    const old = [...container.querySelectorAll('article.msg')].slice(0, history.length);
    expect(old).toHaveLength(history.length);
    let mutations = 0;
    const mo = new MutationObserver(() => {});
    for (const el of old) mo.observe(el, { subtree: true, childList: true, characterData: true, attributes: true });

    const words = 'Streaming **reply** in\n\nseveral blocks, with a list:\n\n- one\n- two\n\nand the end.'.split(/(?<= )/);
    for (const w of words) {
      fake.emit('chat', { conversation_id: 1, message_id: 100, kind: 'text', text: w });
      frames.tick();
      flushSync();
    }
    mutations += mo.takeRecords().length;
    expect(mutations).toBe(0);
    // At the end the only change to older messages is their Edit buttons coming back.
    fake.emit('chat', { conversation_id: 1, message_id: 100, kind: 'done' });
    flushSync();
    const after = mo.takeRecords();
    mo.disconnect();
    expect(after.every((r) => r.type === 'attributes' && r.attributeName === 'disabled')).toBe(true);

    expect(chat.flushes).toBe(words.length);
    const replyEl = container.querySelectorAll('article.msg.assistant');
    expect(replyEl[replyEl.length - 1].textContent).toContain('and the end.');
  });
});
