//! The SSE frame parser of the event stream (docs/protocol.md §11.4).
//!
//! Bytes are decoded as a UTF-8 stream (a character split between two chunks is kept for the
//! next; invalid bytes become U+FFFD, as a `TextDecoder` does) and buffered. A frame ends at a
//! blank line, where a line ends with `\n` or `\r\n` (a lone `\r` is not a line end). Only
//! `data:` lines count: the prefix and all leading whitespace are removed and the lines joined
//! with `\n`; `id:`, `event:`, `retry:` and comments are ignored, and a frame without data (a
//! heartbeat) yields nothing. A partial frame left at the end of the stream is discarded by
//! simply dropping the parser.
//!
//! Frames are bounded as the newest reference client bounds them: a complete frame over
//! [`MAX_SSE_FRAME_BYTES`] of UTF-8, or as much text buffered without a frame's end, is
//! `STREAM_FRAME_TOO_LARGE`, so a server cannot make the client buffer without end.

use agent_runtime::protocol::ProtocolError;
pub use agent_runtime::protocol::event::MAX_SSE_FRAME_BYTES;

/// Incremental parser: feed it chunks, get the `data` of each complete frame.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a UTF-8 sequence split by a chunk boundary.
    undecoded: Vec<u8>,
    /// Decoded text not yet part of a complete frame.
    buffer: String,
    /// Where the search for a delimiter resumes (an index into `buffer`): everything before was
    /// scanned.
    scanned: usize,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Adds a chunk and returns the data of every frame it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<String>, ProtocolError> {
        let text = self.decode(chunk);
        self.buffer.push_str(&text);

        // Complete frames are consumed by moving `start`; the buffer is shifted once at the end
        // (shifting it per frame would cost the rest of the chunk for every frame in it).
        let mut frames = Vec::new();
        let mut start = 0;
        while let Some((frame_end, next_start)) = self.find_delimiter(start) {
            if frame_end - start > MAX_SSE_FRAME_BYTES {
                return Err(ProtocolError::stream_frame_too_large());
            }
            let data = frame_data(&self.buffer[start..frame_end]);
            start = next_start;
            self.scanned = start;
            if !data.is_empty() {
                frames.push(data);
            }
        }
        self.buffer.drain(..start);
        self.scanned -= start;
        if self.buffer.len() > MAX_SSE_FRAME_BYTES {
            return Err(ProtocolError::stream_frame_too_large());
        }
        Ok(frames)
    }

    /// Decodes as much of `undecoded + chunk` as forms complete characters.
    fn decode(&mut self, chunk: &[u8]) -> String {
        self.undecoded.extend_from_slice(chunk);
        let mut text = String::new();
        let mut rest: &[u8] = &self.undecoded;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    // Checked by from_utf8 up to here.
                    text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        // An incomplete sequence at the end: wait for the next chunk.
                        None => {
                            rest = after;
                            break;
                        }
                        Some(invalid) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[invalid..];
                        }
                    }
                }
            }
        }
        self.undecoded = rest.to_vec();
        text
    }

    /// The end of the first frame at or after `start` and the start of what follows its blank
    /// line (indices into the buffer).
    fn find_delimiter(&mut self, start: usize) -> Option<(usize, usize)> {
        let bytes = self.buffer.as_bytes();
        let mut index = self.scanned.max(start);
        // `str::find` of a char uses the standard library's fast byte search.
        while let Some(offset) = self.buffer[index..].find('\n') {
            let newline = index + offset;
            match &bytes[newline + 1..] {
                [b'\n', ..] => return Some((newline, newline + 2)),
                [b'\r', b'\n', ..] => return Some((newline, newline + 3)),
                // `\n` or `\n\r` at the end: the next chunk decides.
                [] | [b'\r'] => {
                    self.scanned = newline;
                    return None;
                }
                _ => index = newline + 1,
            }
        }
        self.scanned = bytes.len();
        None
    }
}

/// The joined `data:` lines of one frame (the text before its blank line).
fn frame_data(frame: &str) -> String {
    let mut lines = Vec::new();
    for line in frame.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(value) = line.strip_prefix("data:") {
            lines.push(value.trim_start());
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests;
