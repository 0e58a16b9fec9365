// The HTTP transport (a browser talking to `minerva serve --ui`): what a call sends, errors in
// the server's words, the API key asked once on 401 and sent from then on, events from one
// shared EventSource to the right handlers; which transport a page picks; and exports that
// become browser downloads in such a page.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { API_KEY_STORAGE, defaultTransport, httpTransport, mockTransport } from '../lib/transport';
import { BenchStore } from '../lib/stores/bench.svelte';
import type { BenchView } from '../lib/api';
import { fakeTransport } from './fake';

/** jsdom has no EventSource: this one records its listeners, and the test fires events. */
class FakeEventSource {
  static all: FakeEventSource[] = [];
  listeners = new Map<string, Set<(e: MessageEvent) => void>>();
  closed = false;
  constructor(public url: string) {
    FakeEventSource.all.push(this);
  }
  addEventListener(type: string, fn: (e: MessageEvent) => void) {
    let set = this.listeners.get(type);
    if (!set) this.listeners.set(type, (set = new Set()));
    set.add(fn);
  }
  removeEventListener(type: string, fn: (e: MessageEvent) => void) {
    this.listeners.get(type)?.delete(fn);
  }
  close() {
    this.closed = true;
  }
  /** What the server's `event: <type>` / `data: <json>` lines become. */
  fire(type: string, payload: unknown) {
    const e = new MessageEvent(type, { data: JSON.stringify(payload) });
    for (const fn of [...(this.listeners.get(type) ?? [])]) fn(e);
  }
  count() {
    return [...this.listeners.values()].reduce((n, s) => n + s.size, 0);
  }
}

type Answer = { status: number; body?: string; statusText?: string };
/** A fetch that answers from `answers` in turn (the last one repeats) and records each request. */
function stubFetch(...answers: Answer[]) {
  const requests: { url: string; init: RequestInit; headers: Record<string, string> }[] = [];
  const fetch = vi.fn(async (url: string, init: RequestInit) => {
    requests.push({ url, init, headers: { ...(init.headers as Record<string, string>) } });
    const a = answers[Math.min(requests.length - 1, answers.length - 1)];
    return new Response(a.body ?? null, { status: a.status, statusText: a.statusText ?? '' });
  });
  vi.stubGlobal('fetch', fetch);
  return requests;
}

const refused = (status: number, message: string, type = 'invalid_request_error') => ({
  status,
  body: JSON.stringify({ error: { message, type } }),
});

beforeEach(() => {
  FakeEventSource.all = [];
  vi.stubGlobal('EventSource', FakeEventSource);
  sessionStorage.clear();
});

afterEach(() => {
  vi.unstubAllGlobals();
  document.head.querySelector('meta[name="minerva-transport"]')?.remove();
});

describe('http transport: commands', () => {
  it('POSTs the arguments as JSON to /api/call/<command> and returns the JSON answer', async () => {
    const requests = stubFetch({ status: 200, body: '{"load_id":"L1"}' }, { status: 200, body: 'null' });
    const t = httpTransport('http://host:9');
    expect(await t.invoke('load_model', { path: '/m/a b.gguf', backend: 'cpu', ctx: 2048 })).toEqual({ load_id: 'L1' });
    expect(requests[0].url).toBe('http://host:9/api/call/load_model');
    expect(requests[0].init.method).toBe('POST');
    expect(requests[0].headers).toEqual({ 'content-type': 'application/json' });
    expect(JSON.parse(requests[0].init.body as string)).toEqual({ path: '/m/a b.gguf', backend: 'cpu', ctx: 2048 });
    // No arguments: an empty object; a null answer stays null.
    expect(await t.invoke('status')).toBeNull();
    expect(requests[1].url).toBe('http://host:9/api/call/status');
    expect(requests[1].init.body).toBe('{}');
  });

  it('escapes the command name in the URL', async () => {
    const requests = stubFetch({ status: 200, body: '[]' });
    await httpTransport().invoke('a/b?c');
    expect(requests[0].url).toBe('/api/call/a%2Fb%3Fc');
  });

  it('rejects with the server\'s message, or its status text when the body is not JSON', async () => {
    stubFetch(refused(400, '"/notes.txt" is not a model Minerva can read.'));
    const t = httpTransport();
    const call = t.invoke('open_model', { path: '/notes.txt' });
    await expect(call).rejects.toBeInstanceOf(Error);
    await expect(call).rejects.toThrow(/^"\/notes\.txt" is not a model Minerva can read\.$/);

    stubFetch({ status: 502, body: '<html>Bad gateway</html>', statusText: 'Bad Gateway' });
    await expect(t.invoke('status')).rejects.toThrow('Bad Gateway');

    vi.stubGlobal('fetch', () => Promise.reject(new TypeError('Failed to fetch')));
    await expect(t.invoke('status')).rejects.toThrow('Could not reach the Minerva server (Failed to fetch).');
  });
});

describe('http transport: the API key', () => {
  it('asks once on 401, retries with the key, keeps it for the tab and sends it from then on', async () => {
    const requests = stubFetch(refused(401, 'This server needs an API key.', 'authentication_error'), { status: 200, body: '[]' });
    const prompt = vi.fn(() => ' sekrit ');
    vi.stubGlobal('prompt', prompt);
    const t = httpTransport();
    expect(await t.invoke('loaded_models')).toEqual([]);
    expect(prompt).toHaveBeenCalledTimes(1);
    expect(prompt).toHaveBeenCalledWith('This Minerva server needs its API key');
    expect(requests).toHaveLength(2);
    expect(requests[0].headers.authorization).toBeUndefined();
    expect(requests[1].headers.authorization).toBe('Bearer sekrit');
    expect(sessionStorage.getItem(API_KEY_STORAGE)).toBe('sekrit');

    await t.invoke('found_models');
    expect(requests[2].headers.authorization).toBe('Bearer sekrit');
    expect(prompt).toHaveBeenCalledTimes(1);
    // A new page of the same tab starts with the key.
    await httpTransport().invoke('status');
    expect(requests[3].headers.authorization).toBe('Bearer sekrit');
  });

  it('calls refused at the same time share one prompt', async () => {
    let n = 0;
    vi.stubGlobal('fetch', async (_url: string, init: RequestInit) => {
      n++;
      const auth = (init.headers as Record<string, string>).authorization;
      return auth === 'Bearer k' ? new Response('1', { status: 200 }) : new Response(refused(401, 'key').body, { status: 401 });
    });
    const prompt = vi.fn(() => 'k');
    vi.stubGlobal('prompt', prompt);
    const t = httpTransport();
    expect(await Promise.all([t.invoke('a'), t.invoke('b'), t.invoke('c')])).toEqual([1, 1, 1]);
    expect(prompt).toHaveBeenCalledTimes(1);
    expect(n).toBe(6);
  });

  it('a wrong key is refused in the server\'s words; a cancelled prompt is not shown again', async () => {
    stubFetch(refused(401, 'The API key is wrong.', 'authentication_error'));
    vi.stubGlobal('prompt', () => 'guess');
    const t = httpTransport();
    await expect(t.invoke('status')).rejects.toThrow('The API key is wrong.');
    // The wrong key is not kept.
    expect(sessionStorage.getItem(API_KEY_STORAGE)).toBeNull();

    const cancel = vi.fn(() => null);
    vi.stubGlobal('prompt', cancel);
    await expect(t.invoke('status')).rejects.toThrow('The API key is wrong.');
    await expect(t.invoke('status')).rejects.toThrow('The API key is wrong.');
    expect(cancel).toHaveBeenCalledTimes(1);
  });
});

describe('http transport: events', () => {
  it('one EventSource for every listener; each event reaches its handlers; unlisten stops them', async () => {
    const t = httpTransport();
    const chat: unknown[] = [];
    const other: unknown[] = [];
    const done: unknown[] = [];
    const stopChat = await t.listen('chat', (p) => chat.push(p));
    await t.listen('chat', (p) => other.push(p));
    await t.listen('load-done', (p) => done.push(p));
    expect(FakeEventSource.all).toHaveLength(1);
    const es = FakeEventSource.all[0];
    expect(es.url).toBe('/api/events');

    es.fire('chat', { conversation_id: 1, message_id: 2, kind: 'text', text: 'Par' });
    es.fire('load-done', { load_id: 'L1', model: { id: 1 } });
    expect(chat).toEqual([{ conversation_id: 1, message_id: 2, kind: 'text', text: 'Par' }]);
    expect(other).toHaveLength(1);
    expect(done).toEqual([{ load_id: 'L1', model: { id: 1 } }]);

    stopChat();
    es.fire('chat', { kind: 'done' });
    expect(chat).toHaveLength(1);
    expect(other).toHaveLength(2);
    expect(es.closed).toBe(false);
  });

  it('closes the stream when the last listener leaves, and opens a new one for the next', async () => {
    const t = httpTransport();
    const stop = await t.listen('chat', () => {});
    stop();
    stop(); // twice is harmless
    expect(FakeEventSource.all[0].closed).toBe(true);
    await t.listen('chat', () => {});
    expect(FakeEventSource.all).toHaveLength(2);
  });

  it('sends the key in the query, and opens the stream again once the key is learned', async () => {
    stubFetch(refused(401, 'key'), { status: 200, body: 'null' });
    vi.stubGlobal('prompt', () => 'a&b');
    const t = httpTransport('http://h');
    const got: unknown[] = [];
    await t.listen('bench-progress', (p) => got.push(p));
    expect(FakeEventSource.all[0].url).toBe('http://h/api/events');
    await t.invoke('status');
    const [first, second] = FakeEventSource.all;
    expect(first.closed).toBe(true);
    expect(second.url).toBe('http://h/api/events?api_key=a%26b');
    // The listeners moved to the new stream.
    expect(second.count()).toBe(1);
    second.fire('bench-progress', { job: 1 });
    expect(got).toEqual([{ job: 1 }]);
  });
});

describe('the transport a page picks', () => {
  it('is HTTP when the server marked the page, the mock otherwise (vite dev server)', async () => {
    expect(defaultTransport()).toBe(mockTransport);
    const meta = document.createElement('meta');
    meta.name = 'minerva-transport';
    meta.content = 'http';
    document.head.append(meta);
    const t = defaultTransport();
    expect(t).not.toBe(mockTransport);
    const requests = stubFetch({ status: 200, body: '[]' });
    await t.invoke('loaded_models');
    expect(requests[0].url).toBe('/api/call/loaded_models');
  });
});

describe('exports in a page served over HTTP', () => {
  function httpPage() {
    const meta = document.createElement('meta');
    meta.name = 'minerva-transport';
    meta.content = 'http';
    document.head.append(meta);
  }

  /** Records what is handed to the browser as a download. */
  function catchDownloads() {
    const blobs: Blob[] = [];
    const names: string[] = [];
    // jsdom has no object URLs: these two stand in, and go when the test ends.
    const { createObjectURL, revokeObjectURL } = URL;
    URL.createObjectURL = (b: Blob) => (blobs.push(b), 'blob:x');
    URL.revokeObjectURL = () => {};
    const click = vi.spyOn(HTMLAnchorElement.prototype, 'click').mockImplementation(function (this: HTMLAnchorElement) {
      names.push(this.download);
    });
    return {
      blobs,
      names,
      restore: () => {
        click.mockRestore();
        // (the download revokes its URL a second later: that call must still find a function)
        Object.assign(URL, { createObjectURL, revokeObjectURL: revokeObjectURL ?? (() => {}) });
      },
    };
  }

  it('a chart PNG and the JSON report are downloads; no save command, no path asked', async () => {
    httpPage();
    const view: BenchView = {
      summary: { id: 4, created_at: 0, model: 'Qwen3 0.6B', backend: 'cpu', device: 'CPU', formats: [], interrupted: false, imported: false },
      report: { schema: 1, model: 'Qwen3 0.6B' },
      columns: [],
      rows: [],
      charts: [],
      verdicts: [],
    };
    const fake = fakeTransport({ bench_run: () => view });
    const bench = new BenchStore(fake.transport, null);
    await bench.open(4);
    const prompt = vi.fn();
    vi.stubGlobal('prompt', prompt);
    const dl = catchDownloads();
    try {
      await bench.savePng('decode.png', btoa('\x89PNG'));
      await bench.exportRun('json');
    } finally {
      dl.restore();
    }
    expect(dl.names).toEqual(['decode.png', 'qwen3-0.6b-bench.json']);
    expect(new Uint8Array(await dl.blobs[0].arrayBuffer())).toEqual(new Uint8Array([0x89, 0x50, 0x4e, 0x47]));
    expect(dl.blobs[0].type).toBe('image/png');
    expect(JSON.parse(await dl.blobs[1].text())).toEqual(view.report);
    expect(prompt).not.toHaveBeenCalled();
    expect(fake.called('save_png')).toEqual([]);
    expect(fake.called('export_bench_run')).toEqual([]);
  });
});
