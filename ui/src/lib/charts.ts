// The benchmark's charts (SVG markup from the service): sanitized before they are shown, and
// turned into a PNG (base64): the SVG serialized on its own, with the page's chart rules copied
// into a <style> inside it (custom properties resolved to colours, since an image cannot see the
// page's CSS), drawn from a data: URL onto a canvas at 2×.
import DOMPurify from 'dompurify';

/**
 * The service escapes what it writes, but labels can come from an imported report made
 * elsewhere: SVG elements only, no scripts, handlers, styles or foreign objects.
 */
export function sanitizeSvg(svg: string): string {
  return DOMPurify.sanitize(svg, {
    USE_PROFILES: { svg: true },
    ADD_ATTR: ['role', 'aria-label'],
    FORBID_TAGS: ['style', 'foreignObject', 'image', 'a'],
    FORBID_ATTR: ['style'],
  }) as string;
}

/** Chart rules are written as `.chart-card …` in ChartCard.svelte; this is that prefix. */
const SCOPE = /^\.chart-card\s+/;

/**
 * The CSS text of every page rule scoped to `.chart-card`, rewritten for a standalone SVG: the
 * scope dropped and each `var(--x)` replaced by its value on `at` (the theme showing now).
 */
export function chartStyleText(at: Element, sheets: Iterable<CSSStyleSheet> = document.styleSheets): string {
  const computed = getComputedStyle(at);
  const resolve = (css: string) =>
    css.replace(/var\(\s*(--[\w-]+)\s*(?:,([^)]*))?\)/g, (_, name: string, fallback?: string) => {
      return computed.getPropertyValue(name).trim() || (fallback ?? '').trim() || 'initial';
    });
  const out: string[] = [];
  for (const sheet of sheets) {
    let rules: CSSRuleList;
    try {
      rules = sheet.cssRules;
    } catch {
      continue; // a stylesheet from another origin cannot be read
    }
    for (const rule of Array.from(rules)) {
      if (!(rule instanceof CSSStyleRule) || !rule.selectorText.includes('.chart-card')) continue;
      // A minifier may merge selectors: keep each one under `.chart-card ` (no commas inside).
      // Rules of the card itself (its frame, the svg's width on the page) stay on the page.
      const selectors = rule.selectorText
        .split(',')
        .map((part) => part.trim())
        .filter((part) => /^\.chart-card\s/.test(part))
        .map((part) => part.replace(SCOPE, '').trim())
        .filter((part) => part && !part.includes('.chart-card'));
      if (selectors.length) out.push(`${selectors.join(', ')} { ${resolve(rule.style.cssText)} }`);
    }
  }
  return out.join('\n');
}

/** The size an SVG is drawn at: its width/height attributes, else its viewBox, else its box. */
function sizeOf(svg: SVGSVGElement): { width: number; height: number } {
  const w = parseFloat(svg.getAttribute('width') ?? '');
  const h = parseFloat(svg.getAttribute('height') ?? '');
  if (w > 0 && h > 0) return { width: w, height: h };
  const vb = (svg.getAttribute('viewBox') ?? '').split(/[\s,]+/).map(Number);
  if (vb.length === 4 && vb[2] > 0 && vb[3] > 0) return { width: vb[2], height: vb[3] };
  const box = svg.getBoundingClientRect();
  return { width: box.width || 600, height: box.height || 300 };
}

/**
 * The SVG as a standalone document, `scale` times its size, with `css` inside a <style> and a
 * background rect of `background` (a PNG viewer would show transparency as black or white,
 * whatever the text colour).
 */
export function standaloneSvg(svg: SVGSVGElement, css: string, background: string, scale = 2) {
  const { width, height } = sizeOf(svg);
  const clone = svg.cloneNode(true) as SVGSVGElement;
  const ns = 'http://www.w3.org/2000/svg';
  if (!clone.getAttribute('viewBox')) clone.setAttribute('viewBox', `0 0 ${width} ${height}`);
  clone.setAttribute('width', String(width * scale));
  clone.setAttribute('height', String(height * scale));
  const style = document.createElementNS(ns, 'style');
  style.textContent = css;
  const bg = document.createElementNS(ns, 'rect');
  const [x, y] = (clone.getAttribute('viewBox') ?? '0 0').split(/[\s,]+/);
  for (const [k, v] of [['x', x], ['y', y], ['width', '100%'], ['height', '100%'], ['fill', background]]) bg.setAttribute(k, v);
  clone.insertBefore(bg, clone.firstChild);
  clone.insertBefore(style, clone.firstChild);
  return { text: new XMLSerializer().serializeToString(clone), width: width * scale, height: height * scale };
}

/** Draws `svg` (as on the page, with the page's chart colours) at `scale`× and returns PNG base64. */
export async function chartToPngBase64(svg: SVGSVGElement, scale = 2): Promise<string> {
  const scope = svg.closest('.chart-card') ?? svg;
  const background = getComputedStyle(document.documentElement).getPropertyValue('--bg').trim() || '#ffffff';
  const { text, width, height } = standaloneSvg(svg, chartStyleText(scope), background, scale);
  const img = new Image();
  const loaded = new Promise<void>((resolve, reject) => {
    img.onload = () => resolve();
    img.onerror = () => reject(new Error('The chart could not be drawn as an image.'));
  });
  img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(text)}`;
  await loaded;
  const canvas = document.createElement('canvas');
  canvas.width = Math.round(width);
  canvas.height = Math.round(height);
  const ctx = canvas.getContext('2d');
  if (!ctx) throw new Error('This window cannot draw images (no 2D canvas).');
  ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
  return canvas.toDataURL('image/png').replace(/^data:image\/png;base64,/, '');
}
