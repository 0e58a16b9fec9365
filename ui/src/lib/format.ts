// Plain-words formatting of numbers the UI shows: bytes, parameter counts, durations, rates,
// the stats line under a reply, and dtype mixes; and the parts of a remote model's path.
import type { Stats, StopReason } from './api';

/** 1536 → "1.5 KiB"; binary units, as memory is counted. */
export function formatBytes(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Math.max(0, n);
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${Math.round(v)} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[u]}`;
}

/** 1_234_567_890 → "1.23B"; 135_000_000 → "135M". */
export function formatParams(n: number): string {
  if (n >= 1e9) return `${+(n / 1e9).toFixed(n >= 1e10 ? 1 : 2)}B`;
  if (n >= 1e6) return `${Math.round(n / 1e6)}M`;
  if (n >= 1e3) return `${Math.round(n / 1e3)}K`;
  return String(n);
}

export function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}

export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`;
}

export function formatRate(perS: number): string {
  if (!Number.isFinite(perS) || perS <= 0) return '—';
  return `${perS >= 100 ? Math.round(perS) : perS.toFixed(1)} tok/s`;
}

const STOP_WORDS: Record<StopReason, string> = {
  stop: '',
  max_tokens: 'stopped at the token limit',
  cancelled: 'stopped by you',
  context_full: 'context full',
  error: 'ended by an error',
};

/** "182 tokens · TTFT 240 ms · 31.4 tok/s" (plus the stop reason when it was not the model's). */
export function formatStats(s: Stats): string {
  const parts = [
    `${formatCount(s.generated_tokens)} token${s.generated_tokens === 1 ? '' : 's'}`,
    `TTFT ${formatMs(s.time_to_first_token_ms)}`,
    formatRate(s.decode_tokens_per_s),
  ];
  const why = STOP_WORDS[s.stop_reason];
  if (why) parts.push(why);
  return parts.join(' · ');
}

/** The same line while the reply is still coming; "≈" when the count is estimated. */
export function formatLiveStats(tokens: number, perS: number, estimated: boolean): string {
  const approx = estimated ? '≈' : '';
  return `${approx}${formatCount(tokens)} tokens · ${approx}${formatRate(perS)}`;
}

/** { Q4_K: 169, F32: 113, Q6_K: 28 } → "Q4_K ×169, F32 ×113, Q6_K ×28" (most used first). */
export function formatDtypes(d: Record<string, number>): string {
  const entries = Object.entries(d).sort((a, b) => b[1] - a[1]);
  return entries.length ? entries.map(([k, v]) => `${k} ×${v}`).join(', ') : '—';
}

export function formatTime(t: number | string): string {
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleString();
}

/**
 * A remote engine's model, `<engine url>#<model id>`, taken apart: the engine's url, the model's
 * id and the engine's host ("gpu-box:8000"); null for any other path.
 */
export function remotePath(path: string): { url: string; model: string; host: string } | null {
  const hash = path.indexOf('#');
  if (hash < 0 || !/^https?:\/\//i.test(path)) return null;
  const url = path.slice(0, hash);
  try {
    return { url, model: path.slice(hash + 1), host: new URL(url).host };
  } catch {
    return null;
  }
}
