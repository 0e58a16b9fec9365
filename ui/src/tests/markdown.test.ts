// Markdown rendering: sanitization of model output, highlighted code blocks with a copy button,
// incremental rendering (finished blocks parsed once), and <think> splitting.
import { describe, expect, it } from 'vitest';
import { IncrementalMarkdown, renderMarkdown, splitThink, type RenderOptions } from '../lib/markdown';
import { registeredLanguages } from '../lib/highlight';

describe('renderMarkdown', () => {
  it('removes scripts, event handlers and javascript: links from model output', () => {
    const html = renderMarkdown(
      'Hi <script>alert(1)</script> <img src="x" onerror="alert(2)"> <a href="javascript:alert(3)">x</a> ' +
        '[y](javascript:alert(4)) <div onclick="alert(5)" style="position:fixed">z</div>',
    );
    expect(html).not.toMatch(/<script/i);
    expect(html).not.toMatch(/onerror|onclick/i);
    expect(html).not.toMatch(/javascript:/i);
    expect(html).not.toMatch(/style=/i);
    expect(html).toContain('Hi');
  });

  it('keeps safe Markdown: emphasis, lists, tables, links that open outside', () => {
    const html = renderMarkdown('**bold** and *it*\n\n- a\n- b\n\n| h |\n|---|\n| c |\n\n[site](https://example.org)');
    expect(html).toContain('<strong>bold</strong>');
    expect(html).toContain('<li>a</li>');
    expect(html).toContain('<table>');
    expect(html).toMatch(/<a href="https:\/\/example.org" target="_blank" rel="noopener noreferrer">/);
  });

  it('does not load remote images named by the model', () => {
    const html = renderMarkdown('![t](https://tracker.example/p.png)');
    expect(html).not.toContain('tracker.example');
  });

  it('highlights a code block and gives it a copy button', () => {
    const html = renderMarkdown('```rust\nfn main() { let x = 1; }\n```');
    expect(html).toContain('class="code-block"');
    expect(html).toMatch(/<button[^>]*class="copy-code"[^>]*>Copy<\/button>/);
    expect(html).toContain('language-rust');
    expect(html).toContain('<span class="hljs-keyword">fn</span>');
  });

  it('escapes code in a language it does not know, and in a block still streaming', () => {
    const html = renderMarkdown('```brainfuck\n<b>++</b>\n```');
    expect(html).toContain('&lt;b&gt;++&lt;/b&gt;');
    const plain = renderMarkdown('```rust\nfn x() {}\n```', { highlight: false });
    expect(plain).not.toContain('hljs-keyword');
    expect(plain).toContain('copy-code');
  });

  it('registers about a dozen languages', () => {
    const langs = registeredLanguages();
    expect(langs).toEqual(expect.arrayContaining(['rust', 'python', 'typescript', 'javascript', 'bash', 'json', 'cpp']));
    expect(langs.length).toBeGreaterThanOrEqual(12);
    expect(langs.length).toBeLessThanOrEqual(16);
  });
});

describe('IncrementalMarkdown', () => {
  const text = [
    '# Title',
    '',
    'First paragraph with **bold** text.',
    '',
    '```python',
    'def f(x):',
    '    return x * 2',
    '```',
    '',
    '- one',
    '- two',
    '',
    'Last paragraph.',
  ].join('\n');

  function stream(md: IncrementalMarkdown, src: string, step = 1) {
    let blocks = md.update('');
    for (let i = step; i < src.length + step; i += step) blocks = md.update(src.slice(0, i));
    return blocks;
  }

  it('renders each finished block once, and only the last block again per update', () => {
    const seen = new Map<string, number>();
    const md = new IncrementalMarkdown((src: string, opts?: RenderOptions) => {
      if (opts?.highlight) seen.set(src, (seen.get(src) ?? 0) + 1);
      return renderMarkdown(src, opts);
    });
    const blocks = stream(md, text);
    // heading, paragraph, code, list are finished; the last paragraph is the streaming tail
    expect(blocks).toHaveLength(5);
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
    expect(seen.size).toBe(4);
    expect(blocks[2].html).toContain('hljs-keyword'); // the closed code block is highlighted
    expect(md.renders).toBe(4 + text.length); // 4 finished blocks + one tail render per update
  });

  it('returns the same objects for finished blocks across updates', () => {
    const md = new IncrementalMarkdown();
    const a = md.update('Para one.\n\nPara two');
    const b = md.update('Para one.\n\nPara two grows');
    expect(a[0]).toBe(b[0]);
    expect(a[1]).not.toBe(b[1]);
    expect(b[1].html).toContain('Para two grows');
  });

  it('finishes with one full parse equal to rendering the whole text', () => {
    const md = new IncrementalMarkdown();
    stream(md, text, 7);
    const before = md.renders;
    const done = md.finish(text);
    expect(md.renders).toBe(before + 1);
    expect(done).toEqual([{ key: 'full', html: renderMarkdown(text) }]);
  });

  it('while streaming, the blocks read the same as the full parse', () => {
    const md = new IncrementalMarkdown();
    const blocks = stream(md, text, 3);
    const strip = (h: string) => h.replace(/<[^>]+>/g, '').replace(/\s+/g, ' ').trim();
    expect(strip(blocks.map((b) => b.html).join(''))).toBe(strip(renderMarkdown(text)));
  });

  it('starts over when the text is not a continuation', () => {
    const md = new IncrementalMarkdown();
    md.update('Alpha.\n\nBeta');
    const blocks = md.update('Gamma.\n\nDelta');
    expect(blocks.map((b) => b.html).join('')).toContain('Gamma');
    expect(blocks.map((b) => b.html).join('')).not.toContain('Alpha');
  });
});

describe('splitThink', () => {
  it('splits inline <think> reasoning from the answer', () => {
    expect(splitThink('<think>\nLet me see.\n</think>\n\nThe answer.')).toEqual({ reasoning: 'Let me see.', answer: 'The answer.' });
    expect(splitThink('<think>still thinking')).toEqual({ reasoning: 'still thinking', answer: '' });
    expect(splitThink('No reasoning here.')).toEqual({ reasoning: null, answer: 'No reasoning here.' });
  });
});
