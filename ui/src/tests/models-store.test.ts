// The models store: opening a card, load progress, cancel, errors in plain words, events that
// arrive before load_model returns.
import { describe, expect, it } from 'vitest';
import { ModelsStore } from '../lib/stores/models.svelte';
import type { LoadedModel, ModelCard } from '../lib/api';
import { fakeTransport, settle } from './fake';
import { createMockTransport } from '../lib/mock';
import type { Transport } from '../lib/transport';

const card: ModelCard = {
  path: '/m/a.gguf',
  format: 'gguf',
  architecture: 'llama',
  parameters: 1.1e9,
  dtypes: { Q4_K: 100, F32: 20 },
  context_length: 8192,
  chat_template: true,
  file_bytes: 7e8,
  memory: { weights_bytes: 6e8, kv_bytes: 1e8, ctx: 2048, available_bytes: 8e9, device: 'CPU', fits: 'yes' },
};
const model: LoadedModel = { id: 7, path: '/m/a.gguf', name: 'a', backend: 'gpu', adapter: 'Test GPU', load_ms: 900, ctx: 2048 };

async function setup() {
  const fake = fakeTransport({
    loaded_models: () => [],
    found_models: () => [
      { path: '/r.gguf', name: 'r', format: 'gguf', bytes: 1, source: 'recent' },
      { path: 'catalogue:x', name: 'x', format: 'safetensors', bytes: 2, source: 'catalogue' },
      { path: '/o', name: 'o', format: 'gguf', bytes: 3, source: 'ollama' },
    ],
    catalogue_problems: () => ['/u/models.toml:14: model \'broken\': architecture \'gpt2\' is not one of llama'],
    status: () => ({ model: null, memory_used_bytes: null }),
    open_model: ({ path }: { path: string }) => (path.endsWith('.gguf') ? card : Promise.reject(`"${path}" is not a model.`)),
    load_model: () => ({ load_id: 'L1' }),
  });
  const models = new ModelsStore(fake.transport);
  await models.init();
  return { fake, models };
}

describe('models store', () => {
  it('sorts found models into recent, catalogue and on disk', async () => {
    const { models } = await setup();
    expect(models.recent.map((m) => m.name)).toEqual(['r']);
    expect(models.catalogue.map((m) => m.name)).toEqual(['x']);
    expect(models.onDisk.map((m) => m.name)).toEqual(['o']);
    expect(models.catalogueProblems).toEqual([
      "/u/models.toml:14: model 'broken': architecture 'gpt2' is not one of llama",
    ]);
  });

  it('opens a card, and shows a refusal in plain words', async () => {
    const { models } = await setup();
    await models.open('/m/a.gguf');
    expect(models.card?.architecture).toBe('llama');
    expect(models.ctx).toBe(2048);
    expect(await models.open('/notes.txt')).toBeNull();
    expect(models.error).toBe('"/notes.txt" is not a model.');
  });

  it('follows progress in bytes to the end', async () => {
    const { fake, models } = await setup();
    let loadedModel: LoadedModel | null = null;
    models.onLoaded = (m) => (loadedModel = m);
    await models.startLoad('/m/a.gguf');
    expect(fake.called('load_model')[0].args).toEqual({ path: '/m/a.gguf', backend: 'auto', ctx: 4096 });
    expect(models.load).toMatchObject({ load_id: 'L1', phase: 'loading' });
    expect(models.busy).toBe(true);
    fake.emit('load-progress', { load_id: 'L1', bytes: 50, total: 200 });
    expect(models.load).toMatchObject({ bytes: 50, total: 200 });
    fake.emit('load-progress', { load_id: 'other', bytes: 199, total: 200 });
    expect(models.load?.bytes).toBe(50);
    fake.emit('load-done', { load_id: 'L1', model });
    expect(models.load?.phase).toBe('done');
    expect(models.busy).toBe(false);
    expect(models.loaded).toEqual([model]);
    expect(loadedModel).toEqual(model);
  });

  it('cancel tells the service and ignores what comes after', async () => {
    const { fake, models } = await setup();
    await models.startLoad('/m/a.gguf');
    fake.emit('load-progress', { load_id: 'L1', bytes: 10, total: 200 });
    await models.cancel();
    expect(fake.called('cancel_load')[0].args).toEqual({ load_id: 'L1' });
    expect(models.load?.phase).toBe('cancelled');
    fake.emit('load-progress', { load_id: 'L1', bytes: 100, total: 200 });
    fake.emit('load-done', { load_id: 'L1', model });
    expect(models.load).toMatchObject({ phase: 'cancelled', bytes: 10 });
    expect(models.loaded).toEqual([]);
  });

  it('a cancel before the service named the load is sent when it does', async () => {
    const { fake, models } = await setup();
    let release!: (v: unknown) => void;
    fake.handlers.load_model = () => new Promise((r) => (release = r));
    const started = models.startLoad('/m/a.gguf');
    await settle();
    await models.cancel();
    expect(models.load?.phase).toBe('cancelled');
    release({ load_id: 'L9' });
    await started;
    expect(fake.called('cancel_load')[0].args).toEqual({ load_id: 'L9' });
  });

  it('a load error is shown in words and the app can load again', async () => {
    const { fake, models } = await setup();
    await models.startLoad('/m/a.gguf');
    fake.emit('load-error', { load_id: 'L1', message: 'Not enough memory: the model needs 9 GB, 6 GB are free.' });
    expect(models.load).toMatchObject({ phase: 'error', error: 'Not enough memory: the model needs 9 GB, 6 GB are free.' });
    expect(models.busy).toBe(false);
    fake.handlers.load_model = () => ({ load_id: 'L2' });
    await models.startLoad('/m/a.gguf');
    expect(models.load).toMatchObject({ load_id: 'L2', phase: 'loading', error: null });
  });

  it('a rejected load_model is an error, not a crash', async () => {
    const { fake, models } = await setup();
    fake.handlers.load_model = () => Promise.reject('The file ends early.');
    await models.startLoad('/m/a.gguf');
    expect(models.load).toMatchObject({ phase: 'error', error: 'The file ends early.' });
    expect(models.error).toBe('The file ends early.');
  });

  it('keeps progress events that arrive before load_model returns', async () => {
    const { fake, models } = await setup();
    let release!: (v: unknown) => void;
    fake.handlers.load_model = () => new Promise((r) => (release = r));
    const started = models.startLoad('/m/a.gguf');
    await settle();
    fake.emit('load-progress', { load_id: 'L3', bytes: 30, total: 100 });
    release({ load_id: 'L3' });
    await started;
    expect(models.load).toMatchObject({ load_id: 'L3', bytes: 30, total: 100, phase: 'loading' });
  });
});

describe('GPU adapters', () => {
  it('are offered by name once the store starts, and none when the service has no answer', async () => {
    const store = new ModelsStore(createMockTransport());
    await store.init();
    expect(store.adapters.map((a) => a.name)).toEqual(['Mock GPU']);
    store.dispose();

    const failing = createMockTransport();
    const broken: Transport = {
      listen: (event, handler) => failing.listen(event, handler),
      invoke: <T>(cmd: string, args?: object): Promise<T> =>
        cmd === 'adapters' ? Promise.reject('no') : failing.invoke<T>(cmd, args),
    };
    const plain = new ModelsStore(broken);
    await plain.init();
    expect(plain.adapters).toEqual([]);
    plain.dispose();
  });
});
