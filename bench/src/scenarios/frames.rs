//! Lean SSE readers for the scenarios whose rates would otherwise measure the load generator:
//! the client's HTTP stack below, and no UTF-8 decoding, JSON parsing or validation above.

/// Counts SSE frames with data (lines starting `data:`) across chunk boundaries.
#[derive(Default)]
pub struct FrameCounter {
    pub frames: u64,
    /// Whether the last byte seen ended a line.
    at_line_start: bool,
    /// Bytes of a `data:` prefix matched at the end of the previous chunk.
    matched: usize,
}

impl FrameCounter {
    const PREFIX: &'static [u8] = b"data:";

    /// A counter at the start of a stream.
    pub fn new() -> FrameCounter {
        FrameCounter {
            at_line_start: true,
            ..FrameCounter::default()
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        for &byte in chunk {
            if self.matched > 0 || self.at_line_start {
                if byte == Self::PREFIX[self.matched] {
                    self.matched += 1;
                    self.at_line_start = false;
                    if self.matched == Self::PREFIX.len() {
                        self.frames += 1;
                        self.matched = 0;
                    }
                    continue;
                }
                self.matched = 0;
            }
            self.at_line_start = byte == b'\n';
        }
    }
}

/// Splits an SSE byte stream into frames and hands out the `data:` line of each.
#[derive(Default)]
pub struct FrameSplitter {
    buffer: Vec<u8>,
    /// Where the search for the next `\n\n` resumes.
    scanned: usize,
}

impl FrameSplitter {
    /// Adds a chunk; calls `on_data` with the `data:` line (without the prefix) of every frame
    /// it completed, in order.
    pub fn push(&mut self, chunk: &[u8], mut on_data: impl FnMut(&[u8])) {
        self.buffer.extend_from_slice(chunk);
        let mut start = 0;
        let mut index = self.scanned;
        while let Some(offset) = self.buffer[index..].windows(2).position(|w| w == b"\n\n") {
            let end = index + offset;
            let frame = &self.buffer[start..end];
            if let Some(data) = frame
                .split(|&b| b == b'\n')
                .find_map(|line| line.strip_prefix(b"data:"))
            {
                on_data(data);
            }
            start = end + 2;
            index = start;
        }
        self.buffer.drain(..start);
        self.scanned = self.buffer.len().saturating_sub(1);
    }
}

/// Whether `haystack` contains `needle`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// The wall-clock stamp of a stamped content delta (`"delta":"delta-I@T "`), if the frame has one.
pub fn stamp(data: &[u8]) -> Option<u64> {
    let at = data.iter().position(|&b| b == b'@')?;
    let digits = data[at + 1..].iter().take_while(|b| b.is_ascii_digit());
    let mut value: u64 = 0;
    let mut any = false;
    for digit in digits {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
        any = true;
    }
    any.then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_data_lines_across_chunks() {
        let stream = b"id: 1\nevent: e\ndata: {}\n\n: heartbeat\n\nid: 2\ndata: {\"data:\"}\n\n";
        for split in 0..stream.len() {
            let mut counter = FrameCounter::new();
            counter.push(&stream[..split]);
            counter.push(&stream[split..]);
            assert_eq!(counter.frames, 2, "split at {split}");
        }
    }

    #[test]
    fn splits_frames_across_chunks_and_reads_stamps() {
        let stream = b"id: 1\nevent: e\ndata: {\"delta\":\"delta-1@1712 \"}\n\n: heartbeat\n\nid: 2\ndata: {\"type\":\"result\"}\n\n";
        for split in 0..stream.len() {
            let mut splitter = FrameSplitter::default();
            let mut frames = Vec::new();
            splitter.push(&stream[..split], |data| frames.push(data.to_vec()));
            splitter.push(&stream[split..], |data| frames.push(data.to_vec()));
            assert_eq!(frames.len(), 2, "split at {split}");
            assert_eq!(stamp(&frames[0]), Some(1712));
            assert!(contains(&frames[1], b"\"type\":\"result\""));
            assert_eq!(stamp(&frames[1]), None);
        }
    }
}
