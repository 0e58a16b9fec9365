// The charts: sanitized SVG keeps what the service draws (classes, titles) and loses scripts;
// the PNG export's standalone SVG carries the page's chart rules with colours resolved, at 2×.
import { describe, expect, it } from 'vitest';
import { chartStyleText, sanitizeSvg, standaloneSvg } from '../lib/charts';
import { mockChart } from '../lib/mock-bench';

const COLUMN = { title: 'Decode', short: 'decode', unit: 'tok/s', better: 'higher' as const };

describe('charts', () => {
  it('keeps the chart and drops scripts and handlers', () => {
    const svg = mockChart(COLUMN, ['a', 'b'], [10, 20], 1);
    const clean = sanitizeSvg(svg.replace('</svg>', '<script>alert(1)</script><rect onclick="x()" class="bar f3"/></svg>'));
    const host = document.createElement('div');
    host.innerHTML = clean;
    const el = host.querySelector('svg.chart')!;
    expect(el.getAttribute('viewBox')).toMatch(/^0 0 600 /);
    expect(el.getAttribute('role')).toBe('img');
    expect(el.querySelectorAll('rect.bar')).toHaveLength(3);
    expect(el.querySelector('rect.bar.f1.reference title')?.textContent).toBe('b: 20');
    expect(el.querySelector('script')).toBeNull();
    expect(clean).not.toMatch(/onclick/);
  });

  it('draws no bar for a figure not measured, and no ticks of nothing when none is', () => {
    const load = { title: 'Cold load', short: 'load', unit: 's', better: 'lower' as const };
    const host = document.createElement('div');
    host.innerHTML = sanitizeSvg(mockChart(load, ['gguf Q8_0', 'remote: m @ gpu-box:8000'], [0.42, null], 0));
    expect(host.querySelectorAll('rect.bar')).toHaveLength(1);
    expect(host.querySelector('rect.bar title')?.textContent).toBe('gguf Q8_0: 0.42');
    expect(host.textContent).toMatch(/not measured/);
    host.innerHTML = sanitizeSvg(mockChart(load, ['remote: m @ gpu-box:8000'], [null], null));
    expect(host.querySelectorAll('rect.bar')).toHaveLength(0);
    expect([...host.querySelectorAll('text.tick')].map((t) => t.textContent)).toEqual(['0', '0.25', '0.5', '0.75', '1']);
  });

  it('copies the .chart-card rules into the image, var()s resolved, card rules left out', () => {
    const style = document.createElement('style');
    style.textContent = `
      .chart-card .chart .f0 { fill: var(--chart-f0); }
      .chart-card .chart text, .chart-card.svelte-y svg { fill: var(--fg); font-size: 12px; }
      .chart-card.svelte-x svg { width: 100%; }
      .elsewhere { color: red; }`;
    document.head.append(style);
    const card = document.createElement('figure');
    card.className = 'chart-card';
    card.style.setProperty('--chart-f0', '#0072b2');
    card.style.setProperty('--fg', '#1d2025');
    document.body.append(card);
    const css = chartStyleText(card, [style.sheet!]);
    expect(css).toMatch(/^\.chart \.f0 \{ fill: #0072b2; \}/);
    expect(css).toMatch(/\.chart text \{ fill: #1d2025; font-size: 12px; \}/);
    expect(css).not.toMatch(/chart-card|width|elsewhere|var\(/);

    card.innerHTML = mockChart(COLUMN, ['a'], [3], null);
    const out = standaloneSvg(card.querySelector('svg')!, css, '#ffffff', 2);
    expect(out.width).toBe(1200);
    expect(out.text).toMatch(/^<svg[^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    expect(out.text).toMatch(/width="1200"/);
    expect(out.text).toContain('<style>.chart .f0 { fill: #0072b2; }');
    expect(out.text).toMatch(/<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/);
    style.remove();
    card.remove();
  });
});
