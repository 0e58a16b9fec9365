// Scheduling work for the next animation frame, behind a small interface so tests can drive
// frames by hand (WebKitGTK has rAF; jsdom may not, so fall back to a 16 ms timer).
export interface FrameScheduler {
  request(cb: () => void): number;
  cancel(handle: number): void;
}

export const animationFrames: FrameScheduler = {
  request(cb) {
    if (typeof requestAnimationFrame === 'function') return requestAnimationFrame(() => cb());
    return setTimeout(cb, 16) as unknown as number;
  },
  cancel(handle) {
    if (typeof requestAnimationFrame === 'function') cancelAnimationFrame(handle);
    else clearTimeout(handle);
  },
};

/** A scheduler whose frames run only when `tick()` is called (tests, benchmarks). */
export class ManualFrames implements FrameScheduler {
  #next = 1;
  #queue = new Map<number, () => void>();
  requested = 0;

  request(cb: () => void): number {
    const h = this.#next++;
    this.#queue.set(h, cb);
    this.requested++;
    return h;
  }
  cancel(handle: number): void {
    this.#queue.delete(handle);
  }
  get pending(): number {
    return this.#queue.size;
  }
  /** Runs every callback queued before this frame. */
  tick(): void {
    const due = [...this.#queue.values()];
    this.#queue.clear();
    for (const cb of due) cb();
  }
}
