//! Incremental decoding of a `text/event-stream` body into events (the subset both provider APIs
//! use: `event:` and `data:` fields, events ending at a blank line, `:` comments ignored).

/// One server-sent event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty when the server sent none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The largest event (or line) taken from a provider: far past any answer a model streams, so
/// that a broken proxy or endpoint cannot make the executor buffer without end.
pub const MAX_PROVIDER_EVENT_BYTES: usize = 32 << 20;

/// Why a body cannot be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SseError {
    NotUtf8,
    /// An event or a line over [`MAX_PROVIDER_EVENT_BYTES`].
    TooLarge,
}

/// Feeds on body chunks, yields complete events. Bytes are buffered until a full line arrives,
/// so a UTF-8 character split across chunks is decoded whole.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
    /// How much of `buffer` is known to hold no line end.
    scanned: usize,
    current: SseEvent,
    has_data: bool,
}

impl SseDecoder {
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.buffer[start + self.scanned..]
            .iter()
            .position(|&b| b == b'\n')
        {
            let end = start + self.scanned + offset + 1;
            self.scanned = 0;
            let line =
                std::str::from_utf8(&self.buffer[start..end]).map_err(|_| SseError::NotUtf8)?;
            let line = line.trim_end_matches(['\n', '\r']).to_owned();
            start = end;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
            if self.current.data.len() > MAX_PROVIDER_EVENT_BYTES {
                return Err(SseError::TooLarge);
            }
        }
        self.buffer.drain(..start);
        self.scanned = self.buffer.len();
        if self.buffer.len() > MAX_PROVIDER_EVENT_BYTES {
            return Err(SseError::TooLarge);
        }
        Ok(events)
    }

    /// An event still open when the body ended (a server that omits the final blank line).
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.has_data.then(|| {
            self.has_data = false;
            std::mem::take(&mut self.current)
        })
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.finish();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.current.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` mean nothing for a one-shot model stream.
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_or_an_event_past_the_bound_is_refused_and_a_large_answer_is_not() {
        let mut decoder = SseDecoder::default();
        let chunk = vec![b'x'; 1 << 20];
        let refused = (0..40).find_map(|_| decoder.push(&chunk).err());
        assert_eq!(refused, Some(SseError::TooLarge));

        // Many data lines of one event add up.
        let mut decoder = SseDecoder::default();
        let line = format!("data: {}\n", "y".repeat(1 << 20));
        let refused = (0..40).find_map(|_| decoder.push(line.as_bytes()).err());
        assert_eq!(refused, Some(SseError::TooLarge));

        // A 4.5 MB answer in one event, sent in small chunks, is decoded whole.
        let mut decoder = SseDecoder::default();
        let body = format!("data: {}\n\n", "漢".repeat(1_500_000));
        let events: Vec<SseEvent> = body
            .as_bytes()
            .chunks(16 << 10)
            .flat_map(|chunk| decoder.push(chunk).unwrap())
            .collect();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.len(), 4_500_000);
    }

    #[test]
    fn events_split_across_chunks_and_crlf() {
        let mut decoder = SseDecoder::default();
        assert!(
            decoder
                .push(b"event: a\r\ndata: {\"x\"")
                .unwrap()
                .is_empty()
        );
        let events = decoder
            .push(b":1}\r\n\r\n: ping\n\ndata: [DONE]\n\n")
            .unwrap();
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: "a".into(),
                    data: "{\"x\":1}".into()
                },
                SseEvent {
                    event: String::new(),
                    data: "[DONE]".into()
                },
            ]
        );
    }

    #[test]
    fn multibyte_character_split_between_chunks() {
        let mut decoder = SseDecoder::default();
        let text = "data: é\n\n".as_bytes();
        assert!(decoder.push(&text[..7]).unwrap().is_empty());
        let events = decoder.push(&text[7..]).unwrap();
        assert_eq!(events[0].data, "é");
    }
}
