// The chat state: conversations, the open conversation's messages, and the reply being streamed.
// Deltas from `chat` events go into plain string buffers; state is written once per animation
// frame (so a burst of events costs one render), and once more when the reply ends.
import type { Transport } from '../transport';
import { animationFrames, type FrameScheduler } from '../frame';
import { errorText } from '../errors';
import type { ChatEvent, Conversation, Id, Message, Settings, Stats } from '../api';

export interface LiveStats {
  /** Tokens generated so far (estimated from characters until the service sends stats). */
  tokens: number;
  /** Decode speed so far, tokens per second. */
  perS: number;
  estimated: boolean;
  /** Time to the first delta, as the UI saw it. */
  ttftMs: number | null;
}

export interface Streaming {
  conversation_id: Id;
  /** The assistant message being written; null until the service names it. */
  message_id: Id | null;
  stopping: boolean;
}

export interface ChatStoreOptions {
  frames?: FrameScheduler;
  now?: () => number;
}

/** Rough characters per token, for the live count before the service's own numbers arrive. */
const CHARS_PER_TOKEN = 4;

export class ChatStore {
  conversations = $state<Conversation[]>([]);
  query = $state('');
  currentId = $state<Id | null>(null);
  messages = $state<Message[]>([]);
  streaming = $state<Streaming | null>(null);
  live = $state<LiveStats | null>(null);
  error = $state<string | null>(null);
  /** Model for new conversations (the loaded one); set by the app. */
  defaultModelPath = $state<string | null>(null);

  current = $derived(this.conversations.find((c) => c.id === this.currentId) ?? null);

  /** How many frames wrote streamed text to state (tests, benchmark). */
  flushes = 0;

  #t: Transport;
  #frames: FrameScheduler;
  #now: () => number;
  #frame: number | null = null;
  #pendingText = '';
  #pendingReasoning = '';
  #startedAt = 0;
  #firstAt: number | null = null;
  #chars = 0;
  #exact: Stats | null = null;
  #localSerial = 0;
  #unlisten: (() => void) | null = null;

  constructor(transport: Transport, opts: ChatStoreOptions = {}) {
    this.#t = transport;
    this.#frames = opts.frames ?? animationFrames;
    this.#now = opts.now ?? (() => performance.now());
  }

  async init(): Promise<void> {
    this.#unlisten = await this.#t.listen<ChatEvent>('chat', (e) => this.handleEvent(e));
    await this.refreshConversations();
  }

  dispose(): void {
    this.#unlisten?.();
    this.#unlisten = null;
    if (this.#frame != null) this.#frames.cancel(this.#frame);
    this.#frame = null;
  }

  // ---- conversations ----------------------------------------------------------------------

  async refreshConversations(): Promise<void> {
    try {
      const q = this.query.trim();
      this.conversations = await this.#t.invoke<Conversation[]>('list_conversations', q ? { query: q } : {});
    } catch (err) {
      this.error = errorText(err);
    }
  }

  async search(query: string): Promise<void> {
    this.query = query;
    await this.refreshConversations();
  }

  async newConversation(model_path: string | null = this.defaultModelPath, settings?: Settings): Promise<Conversation | null> {
    try {
      const c = await this.#t.invoke<Conversation>('create_conversation', settings ? { model_path, settings } : { model_path });
      this.conversations = [c, ...this.conversations.filter((x) => x.id !== c.id)];
      this.currentId = c.id;
      this.messages = [];
      return c;
    } catch (err) {
      this.error = errorText(err);
      return null;
    }
  }

  async select(id: Id): Promise<void> {
    if (id === this.currentId) return;
    this.currentId = id;
    this.messages = [];
    try {
      const msgs = await this.#t.invoke<Message[]>('get_messages', { conversation_id: id });
      if (this.currentId === id) this.messages = msgs;
    } catch (err) {
      this.error = errorText(err);
    }
  }

  async rename(id: Id, title: string): Promise<void> {
    title = title.trim();
    if (!title) return;
    try {
      await this.#t.invoke('rename_conversation', { id, title });
      const c = this.conversations.find((x) => x.id === id);
      if (c) c.title = title;
    } catch (err) {
      this.error = errorText(err);
    }
  }

  async remove(id: Id): Promise<void> {
    try {
      await this.#t.invoke('delete_conversation', { id });
      this.conversations = this.conversations.filter((x) => x.id !== id);
      if (this.streaming?.conversation_id === id) this.#end();
      if (this.currentId === id) {
        this.currentId = null;
        this.messages = [];
      }
    } catch (err) {
      this.error = errorText(err);
    }
  }

  async updateSettings(patch: Partial<Settings>): Promise<void> {
    const c = this.current;
    if (!c) return;
    const settings = { ...c.settings, ...patch };
    c.settings = settings;
    try {
      await this.#t.invoke('update_settings', { conversation_id: c.id, settings: $state.snapshot(settings) });
    } catch (err) {
      this.error = errorText(err);
    }
  }

  // ---- turns ------------------------------------------------------------------------------

  /** Sends a user message; false (and the text stays with the caller) when it could not. */
  async send(text: string): Promise<boolean> {
    text = text.trim();
    if (!text || this.streaming) return false;
    if (this.currentId == null && !(await this.newConversation())) return false;
    const cid = this.currentId!;
    const local: Message = {
      id: `local-${++this.#localSerial}`,
      conversation_id: cid,
      role: 'user',
      content: text,
      reasoning: null,
      stats: null,
      created_at: Date.now(),
    };
    this.messages.push(local);
    const ok = await this.#start(cid, 'send_message', { conversation_id: cid, text });
    if (!ok) this.messages = this.messages.filter((m) => m.id !== local.id);
    return ok;
  }

  /** Writes the last reply again; the old one is dropped. */
  async regenerate(): Promise<boolean> {
    const cid = this.currentId;
    if (cid == null || this.streaming) return false;
    const last = this.messages[this.messages.length - 1];
    if (!last) return false;
    const removed = last.role === 'assistant' ? this.messages.pop() : undefined;
    const ok = await this.#start(cid, 'regenerate', { conversation_id: cid });
    if (!ok && removed) this.messages.push(removed);
    return ok;
  }

  /** Replaces a user message, drops everything after it, and answers it again. */
  async edit(message_id: Id, text: string): Promise<boolean> {
    text = text.trim();
    const cid = this.currentId;
    const i = this.messages.findIndex((m) => m.id === message_id);
    if (!text || cid == null || this.streaming || i < 0 || this.messages[i].role !== 'user') return false;
    const before = this.messages.slice();
    const oldText = this.messages[i].content;
    this.messages[i].content = text;
    this.messages.splice(i + 1);
    const ok = await this.#start(cid, 'edit_message', { message_id, text });
    if (!ok) {
      before[i].content = oldText;
      this.messages = before;
    }
    return ok;
  }

  async stop(): Promise<void> {
    const s = this.streaming;
    if (!s || s.stopping) return;
    s.stopping = true;
    try {
      await this.#t.invoke('stop', { conversation_id: s.conversation_id });
    } catch (err) {
      // The service could not be told: end the stream here so the app stays usable.
      this.error = errorText(err);
      this.#flush();
      this.#end();
    }
  }

  async #start(cid: Id, command: string, args: object): Promise<boolean> {
    this.error = null;
    this.#begin(cid);
    try {
      const { message_id } = await this.#t.invoke<{ message_id: Id }>(command, args);
      this.#adopt(message_id);
      return true;
    } catch (err) {
      this.error = errorText(err);
      this.#end();
      return false;
    }
  }

  #begin(conversation_id: Id): void {
    this.streaming = { conversation_id, message_id: null, stopping: false };
    this.live = { tokens: 0, perS: 0, estimated: true, ttftMs: null };
    this.#pendingText = '';
    this.#pendingReasoning = '';
    this.#startedAt = this.#now();
    this.#firstAt = null;
    this.#chars = 0;
    this.#exact = null;
  }

  #adopt(message_id: Id): void {
    const s = this.streaming;
    if (!s || s.message_id != null) return;
    s.message_id = message_id;
    this.#target(true);
  }

  #end(): void {
    if (this.#frame != null) this.#frames.cancel(this.#frame);
    this.#frame = null;
    this.#pendingText = '';
    this.#pendingReasoning = '';
    this.streaming = null;
    this.live = null;
  }

  /** The assistant message being written, created in the list when the conversation is open. */
  #target(create: boolean): Message | undefined {
    const s = this.streaming;
    if (!s || s.message_id == null) return undefined;
    for (let i = this.messages.length - 1; i >= 0; i--) if (this.messages[i].id === s.message_id) return this.messages[i];
    if (!create || s.conversation_id !== this.currentId) return undefined;
    this.messages.push({
      id: s.message_id,
      conversation_id: s.conversation_id,
      role: 'assistant',
      content: '',
      reasoning: null,
      stats: null,
      created_at: Date.now(),
    });
    return this.messages[this.messages.length - 1];
  }

  // ---- streaming --------------------------------------------------------------------------

  /** One `chat` event from the service. Public for tests and the benchmark. */
  handleEvent(e: ChatEvent): void {
    const s = this.streaming;
    if (!s || s.conversation_id !== e.conversation_id) return;
    if (s.message_id == null) this.#adopt(e.message_id);
    if (e.message_id !== s.message_id) return; // a late event of an earlier reply
    switch (e.kind) {
      case 'text':
      case 'reasoning':
        if (!e.text) return;
        this.#firstAt ??= this.#now();
        if (e.kind === 'text') this.#pendingText += e.text;
        else this.#pendingReasoning += e.text;
        this.#chars += e.text.length;
        this.#schedule();
        return;
      case 'stats':
        if (e.stats) this.#exact = e.stats;
        this.#schedule();
        return;
      case 'done':
      case 'error': {
        if (e.stats) this.#exact = e.stats;
        this.#flush();
        const msg = this.#target(false);
        if (msg && this.#exact) msg.stats = this.#exact;
        if (e.kind === 'error') this.error = e.message ?? 'The reply stopped because of an error.';
        this.#end();
        void this.#settle(e.conversation_id);
        return;
      }
    }
  }

  #schedule(): void {
    if (this.#frame == null) this.#frame = this.#frames.request(() => this.#flush());
  }

  /** Writes what arrived since the last frame into state: one write per field. */
  #flush(): void {
    if (this.#frame != null) this.#frames.cancel(this.#frame);
    this.#frame = null;
    if (!this.streaming) return;
    const msg = this.#target(true);
    if (msg && (this.#pendingText || this.#pendingReasoning)) {
      this.flushes++;
      if (this.#pendingText) msg.content += this.#pendingText;
      if (this.#pendingReasoning) msg.reasoning = (msg.reasoning ?? '') + this.#pendingReasoning;
    }
    // Not shown (another conversation is open): the service keeps the text; drop our copy.
    this.#pendingText = '';
    this.#pendingReasoning = '';
    this.live = this.#liveStats();
  }

  #liveStats(): LiveStats {
    const ttftMs = this.#firstAt == null ? null : this.#firstAt - this.#startedAt;
    const exact = this.#exact;
    if (exact && exact.generated_tokens > 0) {
      return { tokens: exact.generated_tokens, perS: exact.decode_tokens_per_s, estimated: false, ttftMs };
    }
    const tokens = Math.round(this.#chars / CHARS_PER_TOKEN);
    const seconds = this.#firstAt == null ? 0 : (this.#now() - this.#firstAt) / 1000;
    return { tokens, perS: seconds > 0.05 ? tokens / seconds : 0, estimated: true, ttftMs };
  }

  /** After a reply: take the service's ids (our user message had a local one) and token counts. */
  async #settle(cid: Id): Promise<void> {
    try {
      if (this.currentId === cid) {
        const fresh = await this.#t.invoke<Message[]>('get_messages', { conversation_id: cid });
        if (this.currentId === cid && !this.streaming) this.#merge(fresh);
      }
      await this.refreshConversations();
    } catch (err) {
      this.error = errorText(err);
    }
  }

  /** Keeps the objects of unchanged messages, so their views are not rendered again. */
  #merge(fresh: Message[]): void {
    const old = new Map(this.messages.map((m) => [m.id, m]));
    this.messages = fresh.map((f) => {
      const o = old.get(f.id);
      if (o && o.content === f.content && o.role === f.role && (o.reasoning ?? '') === (f.reasoning ?? '')) {
        if (f.stats && !o.stats) o.stats = f.stats;
        return o;
      }
      return f;
    });
  }
}
