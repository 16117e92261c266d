// A small Markdown renderer for untrusted text (model output). It never parses HTML: every
// piece of text reaches the DOM through textContent, and the only attribute it sets from the
// input is a link's href, and only for http, https and mailto URLs. HTML in the input shows as
// text; a javascript: link shows as text.
//
// Blocks: paragraphs (single newlines kept as line breaks), #-headings, ``` fences, > quotes,
// - * + and 1. lists, --- rules. Inline: `code`, **strong**, *em* / _em_, [text](url), bare URLs.

const SAFE_SCHEMES = new Set(['http:', 'https:', 'mailto:']);

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
  const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1; // the closing fence (or the end)
      const pre = el('pre');
      const code = el('code', body.join('\n'));
      if (fence[2]) code.dataset.lang = fence[2];
      pre.append(code);
      fragment.append(pre);
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2); // the page's own titles are h1, h2
      fragment.append(inline(el(`h${level}`), heading[2].replace(/\s+#+\s*$/, '')));
      i += 1;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      fragment.append(el('hr'));
      i += 1;
      continue;
    }
    if (/^\s*>/.test(line)) {
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) {
        body.push(lines[i].replace(/^\s*>\s?/, ''));
        i += 1;
      }
      const quote = el('blockquote');
      quote.append(renderMarkdown(body.join('\n')));
      fragment.append(quote);
      continue;
    }
    const item = listItem(line);
    if (item) {
      const list = el(item.ordered ? 'ol' : 'ul');
      if (item.ordered && item.start !== 1) list.start = item.start;
      while (i < lines.length) {
        const next = listItem(lines[i]);
        if (next && next.ordered === item.ordered) {
          list.append(inline(el('li'), next.text));
          i += 1;
        } else if (lines[i].trim() && /^\s{2,}/.test(lines[i]) && list.lastChild) {
          // A continuation line of the item above.
          list.lastChild.append(el('br'));
          inline(list.lastChild, lines[i].trim());
          i += 1;
        } else {
          break;
        }
      }
      fragment.append(list);
      continue;
    }
    const paragraph = el('p');
    let first = true;
    while (i < lines.length && lines[i].trim() && !startsBlock(lines[i])) {
      if (!first) paragraph.append(el('br'));
      inline(paragraph, lines[i]);
      first = false;
      i += 1;
    }
    fragment.append(paragraph);
  }
  return fragment;
}

function startsBlock(line) {
  return /^\s*(```|~~~)/.test(line) || /^#{1,6}\s/.test(line) || /^\s*>/.test(line)
    || listItem(line) !== null || /^\s*([-*_])(\s*\1){2,}\s*$/.test(line);
}

function listItem(line) {
  const bullet = line.match(/^\s{0,3}[-*+]\s+(.*)$/);
  if (bullet) return { ordered: false, text: bullet[1] };
  const number = line.match(/^\s{0,3}(\d{1,9})[.)]\s+(.*)$/);
  if (number) return { ordered: true, start: Number(number[1]), text: number[2] };
  return null;
}

// Inline spans, earliest match first. Each pattern's first group is the content.
const INLINE = [
  { re: /`([^`\n]+)`/, make: (m) => el('code', m[1]) },
  { re: /\[([^\]\n]+)\]\(([^)\s]+)\)/, make: (m) => link(m[1], m[2], m[0]) },
  { re: /\*\*([^*\n]+)\*\*/, make: (m) => inline(el('strong'), m[1]) },
  { re: /(?<!\w)__([^_\n]+)__(?!\w)/, make: (m) => inline(el('strong'), m[1]) },
  { re: /\*([^*\s][^*\n]*)\*/, make: (m) => inline(el('em'), m[1]) },
  { re: /(?<![\w])_([^_\s][^_\n]*)_(?![\w])/, make: (m) => inline(el('em'), m[1]) },
  { re: /\bhttps?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/, make: (m) => link(m[0], m[0], m[0]) },
];

/** Appends the inline Markdown `text` to `parent`, and returns `parent`. */
function inline(parent, text) {
  let rest = text;
  while (rest) {
    let best = null;
    for (const rule of INLINE) {
      const m = rule.re.exec(rest);
      if (m && (best === null || m.index < best.m.index)) best = { m, rule };
    }
    if (!best) {
      parent.append(document.createTextNode(rest));
      break;
    }
    if (best.m.index > 0) parent.append(document.createTextNode(rest.slice(0, best.m.index)));
    parent.append(best.rule.make(best.m));
    rest = rest.slice(best.m.index + best.m[0].length);
  }
  return parent;
}

function link(label, target, source) {
  const href = safeUrl(target);
  if (!href) return document.createTextNode(source); // inert: shown as written
  const a = el('a');
  a.href = href;
  a.rel = 'noopener noreferrer nofollow';
  a.target = '_blank';
  inline(a, label);
  return a;
}

function el(tag, text) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  return node;
}
