// Number formatting: the stats line under a reply, live stats, bytes, parameters, dtypes.
import { describe, expect, it } from 'vitest';
import { formatBytes, formatDtypes, formatLiveStats, formatParams, formatStats } from '../lib/format';

describe('stats line', () => {
  const s = {
    prompt_tokens: 40,
    generated_tokens: 182,
    time_to_first_token_ms: 240.4,
    prefill_tokens_per_s: 800,
    decode_tokens_per_s: 31.42,
    stop_reason: 'stop' as const,
  };
  it('shows tokens, time to first token and decode speed', () => {
    expect(formatStats(s)).toBe('182 tokens · TTFT 240 ms · 31.4 tok/s');
  });
  it('names a stop that was not the model’s own', () => {
    expect(formatStats({ ...s, stop_reason: 'cancelled' })).toBe('182 tokens · TTFT 240 ms · 31.4 tok/s · stopped by you');
    expect(formatStats({ ...s, stop_reason: 'max_tokens', time_to_first_token_ms: 1520, decode_tokens_per_s: 142.6, generated_tokens: 1 })).toBe(
      '1 token · TTFT 1.52 s · 143 tok/s · stopped at the token limit',
    );
    expect(formatStats({ ...s, stop_reason: 'context_full' })).toMatch(/context full$/);
  });
  it('marks live estimates', () => {
    expect(formatLiveStats(1234, 25.55, true)).toBe('≈1,234 tokens · ≈25.6 tok/s');
    expect(formatLiveStats(12, 0, false)).toBe('12 tokens · —');
  });
});

describe('sizes', () => {
  it('formats bytes, parameters and dtype mixes', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(4.5 * 1024 ** 3)).toBe('4.5 GiB');
    expect(formatBytes(null)).toBe('—');
    expect(formatParams(1_235_000_000)).toBe('1.24B');
    expect(formatParams(135_000_000)).toBe('135M');
    expect(formatParams(70_600_000_000)).toBe('70.6B');
    expect(formatDtypes({ F32: 65, Q4_K: 193 })).toBe('Q4_K ×193, F32 ×65');
  });
});
