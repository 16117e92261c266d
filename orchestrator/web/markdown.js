// Markdown for untrusted text (model output), parsed by markdown-it (vendored, see
// vendor/README.md) with raw HTML off, and turned into DOM nodes here from its tokens: every
// piece of text reaches the DOM through textContent, never as HTML, and the only attributes set
// from the input are a link's href (http, https and mailto only), an ordered list's start and a
// code block's language. HTML in the input shows as text; a javascript: link shows as text;
// an image shows as its description (the page loads nothing a reply names).
//
// A streaming reply is rendered by a `StreamRenderer`: what lies before the last blank line
// outside a code fence is rendered once and kept, and only the rest is rendered again as text
// arrives, so a long reply costs about its length, not its length squared.

import MarkdownIt from './markdown-it.js';

const SAFE_SCHEMES = new Set(['http:', 'https:', 'mailto:']);

const parser = new MarkdownIt({ html: false, linkify: true, breaks: true });

/** The URL when it is safe to link to, else null. */
export function safeUrl(raw) {
  try {
    const url = new URL(raw.trim(), window.location.href);
    return SAFE_SCHEMES.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

/** Renders `text` into a DocumentFragment. */
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  build(parser.parse(String(text), {}), fragment);
  return fragment;
}

/** Renders a reply that grows: `update(text)` with the whole text so far, `finish(text)` once. */
export class StreamRenderer {
  constructor(element) {
    this.element = element;
    // How much of the text is rendered for good, and the node that holds the rest.
    this.stable = 0;
    this.inFence = false;
    this.tail = document.createElement('div');
    this.tail.className = 'md-tail';
    element.replaceChildren(this.tail);
  }

  update(text) {
    const boundary = this.boundary(text);
    if (boundary > this.stable) {
      this.tail.before(renderMarkdown(text.slice(this.stable, boundary)));
      this.stable = boundary;
    }
    this.tail.replaceChildren(renderMarkdown(text.slice(this.stable)));
  }

  /** The whole text, rendered in one piece (a list or link that spans a blank line joins up). */
  finish(text) {
    this.element.replaceChildren(renderMarkdown(text));
  }

  /** The end of the last blank line after `stable` that lies outside a code fence, or
   * `stable` when there is none. */
  boundary(text) {
    let at = this.stable;
    let inFence = this.inFence;
    let found = this.stable;
    while (at < text.length) {
      const end = text.indexOf('\n', at);
      if (end < 0) break; // the last line may still grow
      const line = text.slice(at, end);
      if (/^\s{0,3}(```|~~~)/.test(line)) inFence = !inFence;
      else if (!inFence && line.trim() === '' && at > this.stable) {
        found = end + 1;
        this.inFence = inFence;
      }
      at = end + 1;
    }
    return found;
  }
}

/** Appends the nodes `tokens` stand for to `parent`. */
function build(tokens, parent) {
  const open = [parent];
  const top = () => open[open.length - 1];
  for (const token of tokens) {
    if (token.nesting === 1) {
      const node = opened(token);
      top().append(node);
      open.push(node);
      continue;
    }
    if (token.nesting === -1) {
      if (open.length > 1) open.pop();
      continue;
    }
    switch (token.type) {
      case 'inline':
        build(token.children || [], top());
        break;
      case 'text':
      case 'html_inline':
      case 'html_block':
        top().append(document.createTextNode(token.content));
        break;
      case 'code_inline':
        top().append(el('code', token.content));
        break;
      case 'softbreak':
      case 'hardbreak':
        top().append(el('br'));
        break;
      case 'fence':
      case 'code_block': {
        const pre = el('pre');
        const code = el('code', token.content.replace(/\n$/, ''));
        const lang = (token.info || '').trim().split(/\s+/)[0];
        if (/^[\w+-]{1,40}$/.test(lang)) code.dataset.lang = lang;
        pre.append(code);
        top().append(pre);
        break;
      }
      case 'hr':
        top().append(el('hr'));
        break;
      case 'image':
        top().append(document.createTextNode(token.content || ''));
        break;
      default:
        if (token.content) top().append(document.createTextNode(token.content));
    }
  }
}

/** The element an opening token stands for. */
function opened(token) {
  if (token.type === 'link_open') {
    const href = safeUrl(token.attrGet('href') || '');
    // Unsafe: its text shows, in a span, as plain text.
    if (!href) return el('span');
    const a = el('a');
    a.href = href;
    a.rel = 'noopener noreferrer nofollow';
    a.target = '_blank';
    return a;
  }
  if (token.type === 'heading_open') {
    // The page's own titles are h1 and h2.
    const level = Math.min(6, Number(token.tag.slice(1)) + 2);
    return el(`h${level}`);
  }
  const node = el(ALLOWED.has(token.tag) ? token.tag : 'span');
  if (token.type === 'ordered_list_open') {
    const start = Number(token.attrGet('start'));
    if (Number.isInteger(start) && start !== 1) node.start = start;
  }
  return node;
}

/** The elements a token may open; anything else becomes a span. */
const ALLOWED = new Set([
  'p', 'blockquote', 'ul', 'ol', 'li', 'em', 'strong', 's', 'table', 'thead', 'tbody', 'tr',
  'th', 'td',
]);

function el(tag, text) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  return node;
}
