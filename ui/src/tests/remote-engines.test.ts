// Remote engines (OpenAI-compatible servers as model sources): the store adds and removes them
// and refreshes the found models, shows refusals in words, loads a remote model without asking
// for a card; the Models screen, against the mock service, adds one, lists its models as remote
// with their host, loads one and chats with it.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { render, screen, waitFor, within } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import App from '../App.svelte';
import { ModelsStore } from '../lib/stores/models.svelte';
import { createMockTransport, normalizeEngineUrl } from '../lib/mock';
import type { FoundModel, LoadedModel, RemoteEngine } from '../lib/api';
import { remotePath } from '../lib/format';
import { fakeTransport } from './fake';

afterEach(() => vi.unstubAllGlobals());

const URL1 = 'http://gpu-box:8000/v1';
const remoteModel: FoundModel = { path: `${URL1}#Qwen/Qwen3-8B`, name: 'Qwen/Qwen3-8B', format: 'remote', bytes: 0, source: 'remote' };

async function setup() {
  let engines: RemoteEngine[] = [];
  const fake = fakeTransport({
    loaded_models: () => [],
    found_models: () => (engines.length ? [remoteModel] : []),
    catalogue_problems: () => [],
    status: () => ({ model: null, memory_used_bytes: null }),
    remote_engines: () => engines,
    add_remote_engine: ({ url, api_key }: { url: string; api_key?: string }) => {
      if (api_key !== 'k') return Promise.reject(`${URL1} refused the API key (401 Unauthorized).`);
      engines = [{ url: URL1, models: ['Qwen/Qwen3-8B'], error: null }];
      return { url: URL1, models: ['Qwen/Qwen3-8B'], given: url };
    },
    remove_remote_engine: () => {
      engines = [];
      return null;
    },
    load_model: () => ({ load_id: 'R1' }),
  });
  const models = new ModelsStore(fake.transport);
  await models.init();
  return { fake, models };
}

describe('models store: remote engines', () => {
  it('adds an engine (the key only when given), then lists it and its models', async () => {
    const { fake, models } = await setup();
    expect(models.remotes).toEqual([]);
    expect(await models.addRemote('  gpu-box:8000 ', ' k ')).toBe(true);
    expect(fake.called('add_remote_engine')[0].args).toEqual({ url: 'gpu-box:8000', api_key: 'k' });
    expect(models.remotes).toEqual([{ url: URL1, models: ['Qwen/Qwen3-8B'], error: null }]);
    expect(models.remote).toEqual([remoteModel]);
    // Remote models are not "found on disk".
    expect(models.onDisk).toEqual([]);

    await models.addRemote(URL1);
    expect(fake.called('add_remote_engine')[1].args).toEqual({ url: URL1 });
  });

  it('a refused engine is an error in words, and nothing is added', async () => {
    const { models } = await setup();
    expect(await models.addRemote(URL1, 'wrong')).toBe(false);
    expect(models.error).toBe(`${URL1} refused the API key (401 Unauthorized).`);
    expect(models.remotes).toEqual([]);
    expect(models.addingRemote).toBe(false);
  });

  it('removes an engine and its models', async () => {
    const { fake, models } = await setup();
    await models.addRemote(URL1, 'k');
    await models.removeRemote(URL1);
    expect(fake.called('remove_remote_engine')[0].args).toEqual({ url: URL1 });
    expect(models.remotes).toEqual([]);
    expect(models.remote).toEqual([]);
  });

  it('a remote model loads when opened: it has no card to read', async () => {
    const { fake, models } = await setup();
    await models.addRemote(URL1, 'k');
    let done: LoadedModel | null = null;
    models.onLoaded = (m) => (done = m);
    await models.openFound(remoteModel);
    expect(fake.called('open_model')).toEqual([]);
    expect(fake.called('load_model')[0].args).toEqual({ path: remoteModel.path, backend: 'auto', ctx: 4096 });
    // No progress comes: load-done alone ends the load.
    const model: LoadedModel = { id: 3, path: remoteModel.path, name: 'Qwen/Qwen3-8B', backend: 'remote', adapter: URL1, load_ms: 40, ctx: 4096 };
    fake.emit('load-done', { load_id: 'R1', model });
    expect(models.load?.phase).toBe('done');
    expect(done).toEqual(model);
  });

  it('a service without remote engines leaves the list empty and shows no error', async () => {
    const fake = fakeTransport({ loaded_models: () => [], found_models: () => [], remote_engines: () => Promise.reject('no such command') });
    const models = new ModelsStore(fake.transport);
    await models.init();
    expect(models.remotes).toEqual([]);
    expect(models.error).toBeNull();
  });
});

describe('remote paths', () => {
  it('are taken apart into the url, the model id and the host', () => {
    expect(remotePath('http://gpu-box:8000/v1#org/model#2')).toEqual({ url: 'http://gpu-box:8000/v1', model: 'org/model#2', host: 'gpu-box:8000' });
    expect(remotePath('/home/me/a#b.gguf')).toBeNull();
    expect(remotePath('catalogue:qwen3-0.6b')).toBeNull();
  });

  it('the mock normalizes engine URLs as the service does', () => {
    expect(normalizeEngineUrl('gpu-box:8000')).toBe('http://gpu-box:8000/v1');
    expect(normalizeEngineUrl('https://h/v1/')).toBe('https://h/v1');
    expect(() => normalizeEngineUrl('ftp://h')).toThrow();
  });
});

describe('Models screen: remote engines, against the mock service', () => {
  function setupApp() {
    const transport = createMockTransport({ loadTickMs: 5, tokenDelayMs: 2, prefillMs: 2, replies: ['The capital of France is Paris.'], reasoning: '' });
    render(App, { transport });
    return userEvent.setup();
  }

  it('adds an engine, lists its models as remote with the host, loads one and chats with it', async () => {
    const user = setupApp();
    await user.type(await screen.findByLabelText('Remote engine URL'), 'http://gpu-box:8000');
    const key = screen.getByLabelText('Remote engine API key') as HTMLInputElement;
    expect(key.type).toBe('password');
    await user.click(screen.getByRole('button', { name: 'Add engine' }));

    const engines = screen.getByRole('region', { name: 'Remote engines' });
    await waitFor(() => expect(engines.textContent).toContain('http://gpu-box:8000/v1'));
    expect(engines.textContent).toContain('2 models');
    // The fields are empty again for the next engine.
    expect((screen.getByLabelText('Remote engine URL') as HTMLInputElement).value).toBe('');

    const list = screen.getByRole('region', { name: 'Remote models' });
    const row = within(list).getByRole('button', { name: 'Qwen/Qwen3-8B' }).closest('li')!;
    expect(row.textContent).toContain('remote');
    expect(row.textContent).toContain('gpu-box:8000');
    expect(row.textContent).not.toMatch(/\d B\b/);

    // The name loads it (no card), and the app moves on to a chat with it.
    await user.click(within(list).getByRole('button', { name: 'Qwen/Qwen3-8B' }));
    await waitFor(() => expect(screen.getByLabelText('Message')).toBeTruthy(), { timeout: 3000 });
    expect(screen.getByLabelText('Status').textContent).toContain('remote · http://gpu-box:8000/v1');
    await user.type(screen.getByLabelText('Message'), 'What is the capital of France?{Enter}');
    await waitFor(() => expect(document.querySelector('article.msg.assistant')?.textContent).toContain('Paris'), { timeout: 3000 });
  });

  it('shows a refusal in the error banner, and Remove takes the engine and its models away', async () => {
    const user = setupApp();
    await user.type(await screen.findByLabelText('Remote engine URL'), 'http://secure-box:8080/v1');
    await user.click(screen.getByRole('button', { name: 'Add engine' }));
    expect((await screen.findByRole('alert')).textContent).toMatch(/refused the API key/);

    await user.type(screen.getByLabelText('Remote engine API key'), 'secret');
    await user.click(screen.getByRole('button', { name: 'Add engine' }));
    await waitFor(() => expect(screen.queryByRole('alert')).toBeNull());
    await screen.findByRole('button', { name: 'Load gemma-3-4b-it' });

    await user.click(screen.getByRole('button', { name: 'Remove http://secure-box:8080/v1' }));
    await waitFor(() => expect(screen.queryByRole('button', { name: 'Load gemma-3-4b-it' })).toBeNull());
    expect(screen.getByRole('region', { name: 'Remote engines' }).textContent).not.toContain('secure-box');
  });
});
