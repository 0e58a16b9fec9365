// The Tauri transport: every command goes through the app's one generic `call` command, with
// the command's name and its arguments ({} when none); events are Tauri events by name.
import { describe, expect, it, vi } from 'vitest';

const invoke = vi.fn(async (_cmd: string, _args?: unknown) => ({ load_id: 'L1' }));
const listen = vi.fn(async (_event: string, _handler: (e: { payload: unknown }) => void) => () => {});
vi.mock('@tauri-apps/api/core', () => ({ invoke: (cmd: string, args?: unknown) => invoke(cmd, args) }));
vi.mock('@tauri-apps/api/event', () => ({
  listen: (event: string, handler: (e: { payload: unknown }) => void) => listen(event, handler),
}));

import { tauriTransport } from '../lib/transport';

describe('tauri transport', () => {
  it('sends commands through `call`', async () => {
    expect(await tauriTransport.invoke('load_model', { path: '/m/a.gguf', backend: 'cpu', ctx: 2048 })).toEqual({ load_id: 'L1' });
    expect(invoke).toHaveBeenLastCalledWith('call', { command: 'load_model', args: { path: '/m/a.gguf', backend: 'cpu', ctx: 2048 } });
    await tauriTransport.invoke('status');
    expect(invoke).toHaveBeenLastCalledWith('call', { command: 'status', args: {} });
  });

  it('hands an event\'s payload to the handler', async () => {
    const got: unknown[] = [];
    await tauriTransport.listen('chat', (p) => got.push(p));
    expect(listen.mock.calls[0][0]).toBe('chat');
    listen.mock.calls[0][1]({ payload: { kind: 'done' } });
    expect(got).toEqual([{ kind: 'done' }]);
  });
});
