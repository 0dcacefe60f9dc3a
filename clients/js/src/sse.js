// The SSE frame reader of docs/protocol.md §11.4: UTF-8 decoding across chunks, frames split at a
// blank line (LF or CRLF), only `data:` lines count, heartbeats skipped, a partial frame at EOF
// dropped, and a bound on how much undelimited text is buffered.

import { AgentProtocolError } from './errors.js';

/** 4 MiB, counted in UTF-16 code units of decoded text as the reference client does. */
export const MAX_FRAME_CHARS = 4 * 1024 * 1024;

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
export async function* sseData(body, maxFrameChars = MAX_FRAME_CHARS) {
  const reader = body.getReader();
  const decoder = new TextDecoder('utf-8');
  let buffer = '';
  let scanned = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      // A delimiter can straddle the previous scan's end by up to 3 characters ("\r\n\r").
      BLANK_LINE.lastIndex = Math.max(0, scanned - 3);
      let start = 0;
      let match;
      const frames = [];
      while ((match = BLANK_LINE.exec(buffer)) !== null) {
        frames.push(buffer.slice(start, match.index));
        start = match.index + match[0].length;
      }
      buffer = buffer.slice(start);
      scanned = buffer.length;
      for (const frame of frames) {
        const data = frameData(frame);
        if (data !== '') yield data;
      }
      if (buffer.length > maxFrameChars) {
        throw new AgentProtocolError('STREAM_FRAME_TOO_LARGE', 'Agent event stream frame exceeds 4 MiB', {
          status: 502,
          retryable: false,
        });
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}
