// Images and PDFs with messages, and the files a turn wrote.
//
// - The composer takes images and PDFs pasted, dropped or picked; each is uploaded to
//   `POST /api/files` as it arrives, so the message the outbox keeps names stored files
//   (`{"type": "file", "fileId"}`), never megabytes of base64, and a retry sends the same ids.
// - A message's images show as thumbnails and its PDFs as links, read with the page's token
//   (`GET /api/files/{id}` into a blob URL: an <img src> could not send the bearer header).
// - A tool call that wrote a file (Write, Edit, MultiEdit, NotebookEdit) gets a link to it in
//   the thread's folder (`GET /api/threads/{id}/files/{path}`), found by the folder's listing.

import { api, authHeaders } from './api.js';

const TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'application/pdf'];
const WRITING_TOOLS = ['Write', 'Edit', 'MultiEdit', 'NotebookEdit'];

/** GET with the page's token, as a blob URL. */
async function blobUrl(path) {
  const response = await fetch(path, { headers: authHeaders() });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return URL.createObjectURL(await response.blob());
}

/** Shows a message's images and documents (file references) under its text. */
export function showMedia(messageEl, blocks) {
  const media = (blocks || []).filter((b) => b.type === 'image' || b.type === 'document');
  if (media.length === 0) return;
  const row = document.createElement('div');
  row.className = 'media';
  for (const block of media) {
    const source = block.source || {};
    if (block.type === 'image') {
      const img = document.createElement('img');
      img.dataset.testid = 'thumbnail';
      img.alt = 'image';
      if (source.localUrl) img.src = source.localUrl;
      else if (source.fileId) {
        img.dataset.fileId = source.fileId;
        blobUrl(`/api/files/${encodeURIComponent(source.fileId)}`)
          .then((url) => { img.src = url; })
          .catch(() => { img.alt = 'image (not available)'; });
      }
      row.append(img);
    } else {
      const link = document.createElement('a');
      link.dataset.testid = 'document';
      link.textContent = `PDF${source.bytes ? ` (${Math.ceil(source.bytes / 1024)} KB)` : ''}`;
      link.href = '#';
      link.addEventListener('click', async (event) => {
        event.preventDefault();
        window.open(await blobUrl(`/api/files/${encodeURIComponent(source.fileId)}`), '_blank');
      });
      row.append(link);
    }
  }
  messageEl.querySelector('.text').after(row);
}

/**
 * The composer's attachments: `tray` shows them; `take(text)` waits for their uploads and
 * returns the message's content (the text alone when there are none) and clears them.
 */
export function composerAttachments({ composer, tray, picker, showError }) {
  let items = [];

  const render = () => {
    tray.replaceChildren();
    tray.hidden = items.length === 0;
    items.forEach((item) => {
      const chip = document.createElement('span');
      chip.className = 'attachment';
      chip.dataset.testid = 'attachment';
      chip.dataset.state = item.state;
      if (item.file.type.startsWith('image/')) {
        const img = document.createElement('img');
        img.src = item.localUrl;
        img.alt = item.file.name || 'image';
        chip.append(img);
      } else {
        chip.append(item.file.name || 'document.pdf');
      }
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.textContent = '×';
      remove.title = 'Remove';
      remove.addEventListener('click', () => {
        items = items.filter((other) => other !== item);
        render();
      });
      chip.append(remove);
      tray.append(chip);
    });
  };

  const add = (files) => {
    for (const file of files) {
      if (!TYPES.includes(file.type)) {
        showError(`Not attached: ${file.name || 'the file'} is ${file.type || 'of no known type'}; images (PNG, JPEG, GIF, WebP) and PDFs are.`);
        continue;
      }
      const item = { file, state: 'uploading', localUrl: URL.createObjectURL(file) };
      item.upload = upload(file).then((stored) => {
        item.stored = stored;
        item.state = 'ready';
        render();
      }, (err) => {
        item.state = 'failed';
        items = items.filter((other) => other !== item);
        render();
        showError(`Not attached: ${err.message}`);
      });
      items.push(item);
    }
    render();
  };

  composer.addEventListener('paste', (event) => {
    const files = Array.from(event.clipboardData ? event.clipboardData.files : []);
    if (files.length === 0) return;
    event.preventDefault();
    add(files);
  });
  composer.addEventListener('dragover', (event) => event.preventDefault());
  composer.addEventListener('drop', (event) => {
    const files = Array.from(event.dataTransfer ? event.dataTransfer.files : []);
    if (files.length === 0) return;
    event.preventDefault();
    add(files);
  });
  picker.addEventListener('change', () => {
    add(Array.from(picker.files));
    picker.value = '';
  });

  return {
    count: () => items.length,
    /** The content to send with `text`: blocks when files are attached. */
    async take(text) {
      await Promise.all(items.map((item) => item.upload));
      const ready = items.filter((item) => item.stored);
      items = [];
      render();
      if (ready.length === 0) return text;
      const blocks = text.trim() ? [{ type: 'text', text }] : [];
      for (const item of ready) {
        blocks.push({
          type: item.stored.mediaType.startsWith('image/') ? 'image' : 'document',
          source: {
            type: 'file', fileId: item.stored.id, media_type: item.stored.mediaType,
            bytes: item.stored.bytes, localUrl: item.localUrl,
          },
        });
      }
      return blocks;
    },
  };
}

async function upload(file) {
  const response = await fetch('/api/files', {
    method: 'POST',
    headers: { ...authHeaders(), 'content-type': file.type },
    body: file,
  });
  const answer = await response.json().catch(() => null);
  if (!response.ok) {
    throw new Error((answer && answer.error && answer.error.message) || `HTTP ${response.status}`);
  }
  return answer;
}

/** The blocks as the API takes them (without the page's local preview URLs). */
export function forApi(content) {
  if (!Array.isArray(content)) return content;
  return content.map((block) => {
    if (!block.source) return block;
    const { localUrl, ...source } = block.source;
    return { ...block, source };
  });
}

/** The text of a message's content. */
export function textOf(content) {
  if (!Array.isArray(content)) return content;
  return content.filter((b) => b.type === 'text').map((b) => b.text).join('\n\n');
}

/**
 * Links a tool call that wrote a file to that file in the thread's folder, once the folder's
 * listing has it (the link says which path; a click downloads it).
 */
export async function linkWrittenFile(details, threadId, call) {
  const input = call.input || {};
  const written = input.file_path || input.notebook_path;
  if (!WRITING_TOOLS.includes(call.name) || typeof written !== 'string') return;
  let listing;
  try {
    listing = await api('GET', `/api/threads/${encodeURIComponent(threadId)}/files`);
  } catch {
    return;
  }
  const match = listing.files
    .filter((file) => written === file.path || written.endsWith(`/${file.path}`))
    .sort((a, b) => b.path.length - a.path.length)[0];
  if (!match || details.querySelector('[data-testid="written-file"]')) return;
  const link = document.createElement('a');
  link.dataset.testid = 'written-file';
  link.dataset.path = match.path;
  link.href = '#';
  link.textContent = `⤓ ${match.path}`;
  link.addEventListener('click', async (event) => {
    event.preventDefault();
    const path = match.path.split('/').map(encodeURIComponent).join('/');
    const url = await blobUrl(`/api/threads/${encodeURIComponent(threadId)}/files/${path}`);
    const save = document.createElement('a');
    save.href = url;
    save.download = match.path.split('/').pop();
    save.click();
  });
  details.querySelector('summary').after(link);
}
