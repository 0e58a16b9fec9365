// The chat store: batched deltas written once per frame, live stats, stop, regenerate, edit,
// events that arrive before the command returns.
import { describe, expect, it } from 'vitest';
import { ChatStore } from '../lib/stores/chat.svelte';
import { ManualFrames } from '../lib/frame';
import { DEFAULT_SETTINGS, type Conversation, type Message, type Stats } from '../lib/api';
import { fakeTransport, settle } from './fake';

const conv: Conversation = {
  id: 1,
  title: 'Test',
  model_path: '/m/a.gguf',
  settings: { ...DEFAULT_SETTINGS },
  created_at: 0,
  updated_at: 0,
  tokens_used: 0,
};

const msg = (id: number, role: Message['role'], content: string): Message => ({
  id,
  conversation_id: 1,
  role,
  content,
  reasoning: null,
  stats: null,
  created_at: 0,
});

const stats = (over: Partial<Stats> = {}): Stats => ({
  prompt_tokens: 10,
  generated_tokens: 5,
  time_to_first_token_ms: 100,
  prefill_tokens_per_s: 100,
  decode_tokens_per_s: 20,
  stop_reason: 'stop',
  ...over,
});

async function setup(history: Message[] = []) {
  const fake = fakeTransport({
    list_conversations: () => [conv],
    get_messages: () => history.map((m) => ({ ...m })),
    send_message: () => ({ message_id: 100 }),
    regenerate: () => ({ message_id: 101 }),
    edit_message: () => ({ message_id: 102 }),
  });
  const frames = new ManualFrames();
  let t = 0;
  const chat = new ChatStore(fake.transport, { frames, now: () => t });
  await chat.init();
  await chat.select(1);
  return { fake, frames, chat, advance: (ms: number) => (t += ms) };
}

const text = (message_id: number, t: string) => ({ conversation_id: 1, message_id, kind: 'text' as const, text: t });

describe('chat store', () => {
  it('buffers deltas and writes state once per frame', async () => {
    const { fake, frames, chat } = await setup();
    expect(await chat.send('hello')).toBe(true);
    expect(chat.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    for (const w of ['One', ' two', ' three', ' four', ' five']) fake.emit('chat', text(100, w));
    // Nothing written yet, and one frame requested for the whole burst.
    expect(chat.messages[1].content).toBe('');
    expect(frames.pending).toBe(1);
    expect(frames.requested).toBe(1);
    frames.tick();
    expect(chat.messages[1].content).toBe('One two three four five');
    expect(chat.flushes).toBe(1);
    fake.emit('chat', text(100, ' six'));
    fake.emit('chat', { conversation_id: 1, message_id: 100, kind: 'reasoning', text: 'hmm' });
    expect(frames.pending).toBe(1);
    frames.tick();
    expect(chat.messages[1].content).toBe('One two three four five six');
    expect(chat.messages[1].reasoning).toBe('hmm');
    expect(chat.flushes).toBe(2);
  });

  it('shows live tokens/s, estimated until the service sends numbers', async () => {
    const { fake, frames, chat, advance } = await setup();
    await chat.send('hi');
    advance(200);
    fake.emit('chat', text(100, 'abcdefgh')); // first delta at 200 ms
    advance(1000);
    fake.emit('chat', text(100, 'abcdefgh'));
    frames.tick();
    expect(chat.live).toMatchObject({ tokens: 4, estimated: true, ttftMs: 200 });
    expect(chat.live!.perS).toBeCloseTo(4, 5);
    fake.emit('chat', { conversation_id: 1, message_id: 100, kind: 'stats', stats: stats({ generated_tokens: 7, decode_tokens_per_s: 33 }) });
    frames.tick();
    expect(chat.live).toMatchObject({ tokens: 7, perS: 33, estimated: false });
  });

  it('takes the message id from an event that beats the command reply', async () => {
    const { fake, frames, chat } = await setup();
    let release!: (v: unknown) => void;
    fake.handlers.send_message = () => new Promise((r) => (release = r));
    const sent = chat.send('hi');
    await settle();
    fake.emit('chat', text(100, 'early'));
    frames.tick();
    expect(chat.messages[1]).toMatchObject({ id: 100, content: 'early' });
    release({ message_id: 100 });
    expect(await sent).toBe(true);
    expect(chat.messages.filter((m) => m.id === 100)).toHaveLength(1);
  });

  it('stops: tells the service, then ends on its done event with the stop reason', async () => {
    const { fake, frames, chat } = await setup();
    await chat.send('hi');
    fake.emit('chat', text(100, 'Partial'));
    await chat.stop();
    expect(fake.called('stop')).toEqual([{ command: 'stop', args: { conversation_id: 1 } }]);
    expect(chat.streaming?.stopping).toBe(true);
    fake.emit('chat', text(100, ' answer'));
    fake.emit('chat', { conversation_id: 1, message_id: 100, kind: 'stats', stats: stats({ stop_reason: 'cancelled' }) });
    fake.emit('chat', { conversation_id: 1, message_id: 100, kind: 'done' });
    // done writes what was pending at once, without waiting for a frame
    expect(chat.streaming).toBeNull();
    expect(chat.live).toBeNull();
    expect(frames.pending).toBe(0);
    expect(chat.messages[1].content).toBe('Partial answer');
    expect(chat.messages[1].stats?.stop_reason).toBe('cancelled');
  });

  it('ends the stream locally when the stop command fails', async () => {
    const { fake, chat } = await setup();
    fake.handlers.stop = () => Promise.reject('The service is gone.');
    await chat.send('hi');
    await chat.stop();
    expect(chat.streaming).toBeNull();
    expect(chat.error).toBe('The service is gone.');
  });

  it('regenerate replaces the last assistant message', async () => {
    const { fake, frames, chat } = await setup([msg(1, 'user', 'q'), msg(2, 'assistant', 'old answer')]);
    expect(chat.messages).toHaveLength(2);
    await chat.regenerate();
    expect(fake.called('regenerate')[0].args).toEqual({ conversation_id: 1 });
    expect(chat.messages.map((m) => m.id)).toEqual([1, 101]);
    fake.emit('chat', text(101, 'new answer'));
    frames.tick();
    expect(chat.messages.map((m) => m.content)).toEqual(['q', 'new answer']);
    expect(chat.messages.some((m) => m.content === 'old answer')).toBe(false);
  });

  it('edit replaces the user message and drops what followed', async () => {
    const history = [msg(1, 'user', 'first'), msg(2, 'assistant', 'a1'), msg(3, 'user', 'second'), msg(4, 'assistant', 'a2')];
    const { fake, frames, chat } = await setup(history);
    expect(await chat.edit(1, 'first, edited')).toBe(true);
    expect(fake.called('edit_message')[0].args).toEqual({ message_id: 1, text: 'first, edited' });
    expect(chat.messages.map((m) => [m.id, m.content])).toEqual([
      [1, 'first, edited'],
      [102, ''],
    ]);
    fake.emit('chat', text(102, 'fresh'));
    frames.tick();
    expect(chat.messages[1].content).toBe('fresh');
  });

  it('edit puts everything back when the service refuses', async () => {
    const history = [msg(1, 'user', 'first'), msg(2, 'assistant', 'a1')];
    const { fake, chat } = await setup(history);
    fake.handlers.edit_message = () => Promise.reject('No model is loaded.');
    expect(await chat.edit(1, 'changed')).toBe(false);
    expect(chat.messages.map((m) => m.content)).toEqual(['first', 'a1']);
    expect(chat.error).toBe('No model is loaded.');
    expect(chat.streaming).toBeNull();
  });

  it('a failed send removes the message and says why', async () => {
    const { fake, chat } = await setup();
    fake.handlers.send_message = () => Promise.reject('No model is loaded: load one on the Models screen first.');
    expect(await chat.send('hi')).toBe(false);
    expect(chat.messages).toHaveLength(0);
    expect(chat.error).toMatch(/No model is loaded/);
  });

  it('after a reply takes the service ids but keeps unchanged message objects', async () => {
    const { fake, frames, chat } = await setup([msg(1, 'user', 'q'), msg(2, 'assistant', 'a')]);
    const first = chat.messages[0];
    await chat.send('next');
    fake.emit('chat', text(100, 'reply'));
    frames.tick();
    fake.handlers.get_messages = () => [msg(1, 'user', 'q'), msg(2, 'assistant', 'a'), msg(99, 'user', 'next'), msg(100, 'assistant', 'reply')];
    fake.emit('chat', { conversation_id: 1, message_id: 100, kind: 'done', stats: stats() });
    await settle();
    expect(chat.messages.map((m) => m.id)).toEqual([1, 2, 99, 100]);
    expect(chat.messages[0]).toBe(first);
    expect(chat.messages[3].stats?.generated_tokens).toBe(5);
  });

  it('ignores events of other conversations and of earlier replies', async () => {
    const { fake, frames, chat } = await setup();
    await chat.send('hi');
    fake.emit('chat', { ...text(100, 'x'), conversation_id: 2 });
    fake.emit('chat', text(55, 'stale'));
    frames.tick();
    expect(chat.messages[1].content).toBe('');
  });
});
