// Benchmark of the streaming render path in jsdom: chat events → the store's buffer → one state
// write per frame → incremental Markdown → DOM, with 40 older messages on screen. Prints the
// tokens per second it sustains and the time per frame; numbers only, no pass/fail.
// Run: npm run bench
import { afterAll, bench, describe } from 'vitest';
import { flushSync, mount, unmount } from 'svelte';
import MessageList from '../src/lib/components/MessageList.svelte';
import { ChatStore } from '../src/lib/stores/chat.svelte';
import { ManualFrames } from '../src/lib/frame';
import { CANNED_REPLIES, mockTokens } from '../src/lib/mock';
import type { ChatEvent, Message } from '../src/lib/api';
import type { Transport } from '../src/lib/transport';

const REPLY = Array.from({ length: 8 }, (_, i) => `## Part ${i + 1}\n\n${CANNED_REPLIES[i % 2]}`).join('\n\n');
const TOKENS = mockTokens(REPLY);

const history: Message[] = Array.from({ length: 40 }, (_, i) => ({
  id: i + 1,
  conversation_id: 1,
  role: i % 2 ? 'assistant' : 'user',
  content: i % 2 ? CANNED_REPLIES[0] : `Question number ${i}?`,
  reasoning: null,
  stats: null,
  created_at: 0,
}));

function transport(): { t: Transport; emit: (e: ChatEvent) => void } {
  let handler: ((e: ChatEvent) => void) | null = null;
  const t: Transport = {
    async invoke<T>(command: string): Promise<T> {
      const answers: Record<string, unknown> = {
        list_conversations: [{ id: 1, title: 'Bench', model_path: null, settings: {}, created_at: 0, updated_at: 0, tokens_used: 0 }],
        get_messages: history,
        send_message: { message_id: 1000 },
      };
      return answers[command] as T;
    },
    async listen<T>(_event: string, h: (p: T) => void) {
      handler = h as (e: ChatEvent) => void;
      return () => {};
    },
  };
  return { t, emit: (e) => handler?.(e) };
}

const results: string[] = [];

async function run(tokensPerFrame: number) {
  const { t, emit } = transport();
  const frames = new ManualFrames();
  const chat = new ChatStore(t, { frames });
  await chat.init();
  await chat.select(1);
  const target = document.createElement('div');
  document.body.appendChild(target);
  const app = mount(MessageList, { target, props: { chat } });
  flushSync();
  await chat.send('Write the long answer.');
  flushSync();

  const frameMs: number[] = [];
  const start = performance.now();
  for (let i = 0; i < TOKENS.length; i += tokensPerFrame) {
    const f0 = performance.now();
    // The service batches: one event carries this frame's tokens.
    emit({ conversation_id: 1, message_id: 1000, kind: 'text', text: TOKENS.slice(i, i + tokensPerFrame).join('') });
    frames.tick();
    flushSync();
    frameMs.push(performance.now() - f0);
  }
  emit({ conversation_id: 1, message_id: 1000, kind: 'done' });
  flushSync();
  const seconds = (performance.now() - start) / 1000;

  unmount(app);
  target.remove();
  chat.dispose();
  frameMs.sort((a, b) => a - b);
  const p95 = frameMs[Math.floor(frameMs.length * 0.95)];
  const mean = frameMs.reduce((a, b) => a + b, 0) / frameMs.length;
  return { tokensPerS: TOKENS.length / seconds, mean, p95, frames: frameMs.length };
}

describe(`streaming render path (${TOKENS.length} tokens, ${REPLY.length} chars, 40 older messages)`, () => {
  for (const perFrame of [1, 4, 16]) {
    let last: Awaited<ReturnType<typeof run>> | null = null;
    bench(
      `${perFrame} token(s) per frame`,
      async () => {
        last = await run(perFrame);
      },
      {
        iterations: 3,
        warmupIterations: 1,
        teardown: () => {
          if (!last) return;
          results.push(
            `${String(perFrame).padStart(2)} tok/frame: ${Math.round(last.tokensPerS).toLocaleString('en-US')} tokens/s sustained; ` +
              `${last.mean.toFixed(2)} ms mean, ${last.p95.toFixed(2)} ms p95 per frame (${last.frames} frames)`,
          );
        },
      },
    );
  }
});

afterAll(() => {
  // One line per setting (the last run of each).
  const seen = new Map<string, string>();
  for (const r of results) seen.set(r.slice(0, 14), r);
  console.log(['', 'Streaming render path in jsdom:', ...seen.values()].join('\n'));
});
