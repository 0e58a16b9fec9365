// A scriptable Transport for unit tests: each command answers from a handler the test gives,
// every call is recorded, and the test emits events by hand. Also a recorder around another
// transport (the mock service), to see what a screen sent.
import type { Transport } from '../lib/transport';

export type Handler = (args: any) => unknown;

export function fakeTransport(handlers: Record<string, Handler> = {}) {
  const listeners = new Map<string, Set<(p: unknown) => void>>();
  const calls: { command: string; args: any }[] = [];
  const transport: Transport = {
    async invoke<T>(command: string, args?: object): Promise<T> {
      calls.push({ command, args: args ?? {} });
      const h = handlers[command];
      if (!h) return null as T;
      return (await h(args ?? {})) as T;
    },
    async listen<T>(event: string, handler: (payload: T) => void) {
      let set = listeners.get(event);
      if (!set) listeners.set(event, (set = new Set()));
      set.add(handler as (p: unknown) => void);
      return () => set.delete(handler as (p: unknown) => void);
    },
  };
  return {
    transport,
    calls,
    handlers,
    emit(event: string, payload: unknown) {
      for (const h of listeners.get(event) ?? []) h(payload);
    },
    called(command: string) {
      return calls.filter((c) => c.command === command);
    },
  };
}

/** Passes everything to `inner` (the mock service, say) and records the commands sent. */
export function recordingTransport(inner: Transport) {
  const calls: { command: string; args: any }[] = [];
  const transport: Transport = {
    invoke<T>(command: string, args?: object): Promise<T> {
      calls.push({ command, args: args ?? {} });
      return inner.invoke<T>(command, args);
    },
    listen: (event, handler) => inner.listen(event, handler),
  };
  return { transport, calls, called: (command: string) => calls.filter((c) => c.command === command) };
}

/** Lets pending promise callbacks run. */
export const settle = () => new Promise<void>((r) => setTimeout(r, 0));
