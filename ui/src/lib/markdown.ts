// Model output → safe HTML: marked (GFM) for Markdown, highlight.js for closed code blocks with
// a copy button, DOMPurify on every result (model output is untrusted). Also the incremental
// renderer used while a reply streams: finished blocks keep their HTML, only the last block is
// parsed again each frame, and one full parse happens when the reply ends.
import { Marked, type Tokens, type Token } from 'marked';
import DOMPurify, { type DOMPurify as Purifier } from 'dompurify';
import { highlight } from './highlight';

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function codeBlock(token: Tokens.Code, withHighlight: boolean): string {
  const lang = (token.lang ?? '').trim().split(/\s+/)[0].toLowerCase();
  const safeLang = /^[\w+#.-]{1,32}$/.test(lang) ? lang : '';
  const body = (withHighlight && safeLang && highlight(token.text, safeLang)) || escapeHtml(token.text);
  const cls = safeLang ? `hljs language-${safeLang}` : 'hljs';
  return (
    `<div class="code-block"><div class="code-head"><span class="code-lang">${safeLang || 'text'}</span>` +
    `<button type="button" class="copy-code" aria-label="Copy code">Copy</button></div>` +
    `<pre><code class="${cls}">${body}</code></pre></div>\n`
  );
}

function makeMarked(withHighlight: boolean): Marked {
  return new Marked({
    gfm: true,
    breaks: false,
    renderer: { code: (token: Tokens.Code) => codeBlock(token, withHighlight) },
  });
}
const highlighted = makeMarked(true);
const plain = makeMarked(false);

let purifier: Purifier | null = null;
function purify(): Purifier {
  if (purifier) return purifier;
  const p = DOMPurify(window);
  p.addHook('afterSanitizeAttributes', (node) => {
    if (node.nodeName === 'A' && node.getAttribute('href')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer');
    }
    // No remote loads from model output: a local app should not call out when it renders text.
    if (node.nodeName === 'IMG' && !/^data:image\//i.test(node.getAttribute('src') ?? '')) {
      node.removeAttribute('src');
      node.removeAttribute('srcset');
    }
  });
  return (purifier = p);
}

const PURIFY_CONFIG = {
  FORBID_TAGS: ['style', 'form', 'input', 'textarea', 'select', 'option', 'iframe', 'object', 'embed', 'link', 'meta', 'base', 'video', 'audio', 'source'],
  FORBID_ATTR: ['style'],
};

/** Sanitizes HTML (scripts, event handlers, javascript: URLs, forms, inline styles go). */
export function sanitize(html: string): string {
  return purify().sanitize(html, PURIFY_CONFIG) as string;
}

export interface RenderOptions {
  /** Highlight code blocks (off for a block still streaming). */
  highlight?: boolean;
}

/** Markdown → sanitized HTML. */
export function renderMarkdown(src: string, opts: RenderOptions = {}): string {
  const md = opts.highlight === false ? plain : highlighted;
  return sanitize(md.parse(src, { async: false }) as string);
}

/** Top-level Markdown tokens (GFM), as marked sees them. */
export function lexBlocks(src: string): Token[] {
  return plain.lexer(src);
}

export interface Block {
  key: string;
  html: string;
}

export type BlockRenderer = (src: string, opts?: RenderOptions) => string;

/**
 * Renders a growing Markdown text in blocks. A top-level block is finished once a later
 * non-blank block follows it: its HTML is made once and kept (same object every frame, so the
 * view does not touch its DOM again). Only the text after the finished blocks is lexed and
 * rendered again on each update. `finish` does the one full parse at the end.
 */
export class IncrementalMarkdown {
  #render: BlockRenderer;
  #done: Block[] = [];
  #doneEnd = 0; // where the finished blocks end in the source
  #src = '';
  #serial = 0;
  /** How many times a renderer call was made (tests, benchmark). */
  renders = 0;

  constructor(render: BlockRenderer = renderMarkdown) {
    this.#render = (src, opts) => {
      this.renders++;
      return render(src, opts);
    };
  }

  /** Blocks for the text so far; `src` is expected to grow by appending. */
  update(src: string): Block[] {
    src = src.replace(/\r\n?/g, '\n');
    if (src.length < this.#doneEnd || src.slice(0, this.#doneEnd) !== this.#src.slice(0, this.#doneEnd)) {
      this.reset();
    }
    this.#src = src;
    const tail = src.slice(this.#doneEnd);
    const tokens = lexBlocks(tail);
    if (tokens.map((t) => t.raw).join('') === tail) {
      let last = tokens.length - 1;
      while (last >= 0 && tokens[last].type === 'space') last--;
      let advanced = 0;
      for (let i = 0; i < last; i++) {
        const t = tokens[i];
        if (t.type !== 'space' && t.raw.trim()) {
          this.#done.push({ key: `b${this.#serial++}`, html: this.#render(t.raw, { highlight: true }) });
        }
        advanced += t.raw.length;
      }
      this.#doneEnd += advanced;
    }
    const rest = src.slice(this.#doneEnd);
    const blocks = this.#done.slice();
    if (rest.trim()) blocks.push({ key: `t${this.#serial}`, html: this.#render(rest, { highlight: false }) });
    return blocks;
  }

  /** The whole text parsed once, as a single block. */
  finish(src: string): Block[] {
    this.reset();
    this.#src = src;
    return src.trim() ? [{ key: 'full', html: this.#render(src, { highlight: true }) }] : [];
  }

  reset(): void {
    this.#done = [];
    this.#doneEnd = 0;
    this.#src = '';
  }
}

/**
 * Reasoning some models write inline, as <think>…</think> before the answer (the service
 * normally sends it apart; this catches the rest). An unclosed <think> is all reasoning so far.
 */
export function splitThink(content: string): { reasoning: string | null; answer: string } {
  const m = /^\s*<think>([\s\S]*?)(?:<\/think>\s*|$)/.exec(content);
  if (!m) return { reasoning: null, answer: content };
  return { reasoning: m[1].trim(), answer: content.slice(m[0].length) };
}
