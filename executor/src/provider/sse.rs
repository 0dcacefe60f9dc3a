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

/// Feeds on body chunks, yields complete events. Bytes are buffered until a full line arrives,
/// so a UTF-8 character split across chunks is decoded whole.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
    current: SseEvent,
    has_data: bool,
}

impl SseDecoder {
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, std::str::Utf8Error> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(newline) = self.buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=newline).collect();
            let line = std::str::from_utf8(&line)?;
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(event) = self.line(line) {
                events.push(event);
            }
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
