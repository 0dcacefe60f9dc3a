// The SSE frame reader of docs/protocol.md §11.4: UTF-8 decoding across chunks, frames split at a
// blank line (LF or CRLF), only `data:` lines count, heartbeats skipped, a partial frame at EOF
// dropped, and the newest reference client's bound: 4 MiB of UTF-8 per complete frame and for
// the text buffered without a frame's end.

import { AgentProtocolError } from './errors.js';

/** 4 MiB of UTF-8. */
export const MAX_FRAME_BYTES = 4 * 1024 * 1024;

/** Bytes of `text` as UTF-8 (a lone surrogate counts as U+FFFD, 3 bytes, as the encoder writes it). */
export function utf8Length(text) {
  let bytes = 0;
  for (let index = 0; index < text.length; index++) {
    const unit = text.charCodeAt(index);
    if (unit < 0x80) bytes += 1;
    else if (unit < 0x800) bytes += 2;
    else if (unit >= 0xd800 && unit < 0xdc00 && index + 1 < text.length) {
      const next = text.charCodeAt(index + 1);
      if (next >= 0xdc00 && next < 0xe000) {
        bytes += 4;
        index++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

function frameTooLarge() {
  return new AgentProtocolError('STREAM_FRAME_TOO_LARGE', 'Agent event stream frame exceeds 4 MiB', {
    status: 502,
    retryable: false,
  });
}

const BLANK_LINE = /\r?\n\r?\n/g;

/** The joined `data:` payload of one frame; '' for frames without data (comments, heartbeats). */
export function frameData(frame) {
  const data = [];
  for (const line of frame.split(/\r?\n/)) {
    if (line.startsWith('data:')) data.push(line.slice(5).replace(/^\s+/, ''));
  }
  return data.join('\n');
}

/**
 * Yields the data of every complete, non-empty frame of `body` (a ReadableStream of bytes).
 * Stops at EOF; cancels the body if the consumer stops early.
 */
export async function* sseData(body, maxFrameBytes = MAX_FRAME_BYTES) {
  const reader = body.getReader();
  const decoder = new TextDecoder('utf-8');
  let buffer = '';
  let bufferBytes = 0;
  let scanned = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      const text = decoder.decode(value, { stream: true });
      buffer += text;
      bufferBytes += utf8Length(text);
      // A delimiter can straddle the previous scan's end by up to 3 characters ("\r\n\r").
      BLANK_LINE.lastIndex = Math.max(0, scanned - 3);
      let start = 0;
      let match;
      const frames = [];
      while ((match = BLANK_LINE.exec(buffer)) !== null) {
        const frame = buffer.slice(start, match.index);
        const frameBytes = utf8Length(frame);
        if (frameBytes > maxFrameBytes) throw frameTooLarge();
        frames.push(frame);
        bufferBytes -= frameBytes + match[0].length;
        start = match.index + match[0].length;
      }
      buffer = buffer.slice(start);
      scanned = buffer.length;
      for (const frame of frames) {
        const data = frameData(frame);
        if (data !== '') yield data;
      }
      if (bufferBytes > maxFrameBytes) throw frameTooLarge();
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}
