use agent_runtime::protocol::ErrorCode;

use super::*;

fn feed(chunks: &[&[u8]]) -> Vec<String> {
    let mut parser = SseParser::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        frames.extend(parser.push(chunk).expect("a valid stream"));
    }
    frames
}

#[test]
fn a_frame_yields_its_data_and_ignores_id_and_event() {
    let frames = feed(&[b"id: 1\nevent: session.stream\ndata: {\"a\":1}\n\n"]);
    assert_eq!(frames, vec!["{\"a\":1}"]);
}

#[test]
fn crlf_and_mixed_line_ends_delimit_frames() {
    let frames = feed(&[b"data: one\r\n\r\ndata: two\n\r\ndata: three\r\n\ndata: four\n\n"]);
    assert_eq!(frames, vec!["one", "two", "three", "four"]);
}

#[test]
fn a_frame_split_at_every_byte_is_the_same_frame() {
    let stream = b"id: 7\r\ndata: {\"x\":\"y\"}\r\n\r\n: heartbeat\n\ndata: z\n\n";
    let chunks: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(feed(&chunks), vec!["{\"x\":\"y\"}", "z"]);
}

#[test]
fn a_delimiter_split_between_chunks_is_found() {
    assert_eq!(feed(&[b"data: a\r\n", b"\r", b"\n"]), vec!["a"]);
    assert_eq!(feed(&[b"data: a\n", b"\n"]), vec!["a"]);
    assert_eq!(feed(&[b"data: a\n\r", b"\ndata: b\n\n"]), vec!["a", "b"]);
}

#[test]
fn a_multibyte_character_split_between_chunks_is_decoded_whole() {
    let text = "data: é€😀\n\n".as_bytes();
    // Split inside the 2-byte é, the 3-byte € and the 4-byte emoji.
    for split in [7, 9, 11, 13] {
        let frames = feed(&[&text[..split], &text[split..]]);
        assert_eq!(frames, vec!["é€😀"], "split at {split}");
    }
    let chunks: Vec<&[u8]> = text.chunks(1).collect();
    assert_eq!(feed(&chunks), vec!["é€😀"]);
}

#[test]
fn invalid_utf8_becomes_the_replacement_character() {
    assert_eq!(feed(&[b"data: a\xffb\n\n"]), vec!["a\u{fffd}b"]);
}

#[test]
fn multiple_data_lines_join_with_newlines_and_lose_leading_whitespace() {
    let frames = feed(&[b"data:first\ndata: \t second\nretry: 5\n: note\ndata:\n\n"]);
    assert_eq!(frames, vec!["first\nsecond\n"]);
}

#[test]
fn heartbeats_and_frames_without_data_yield_nothing() {
    assert!(feed(&[b": heartbeat\n\n", b"id: 3\nevent: x\n\n"]).is_empty());
}

#[test]
fn a_lone_cr_is_not_a_line_end() {
    assert!(feed(&[b"data: a\r\rdata: b\r\r"]).is_empty());
}

#[test]
fn a_trailing_partial_frame_is_not_yielded() {
    let mut parser = SseParser::new();
    assert_eq!(
        parser.push(b"data: done\n\ndata: partial").unwrap(),
        vec!["done"]
    );
    // The stream ends here: the parser is dropped with the partial frame.
    assert!(parser.buffer.ends_with("partial"));
}

#[test]
fn more_than_4_mib_without_a_delimiter_is_stream_frame_too_large() {
    let mut parser = SseParser::new();
    let chunk = vec![b'x'; 64 * 1024];
    parser.push(b"data: ").unwrap();
    let mut sent = 6;
    let error = loop {
        match parser.push(&chunk) {
            Ok(frames) => assert!(frames.is_empty()),
            Err(error) => break error,
        }
        sent += chunk.len();
        assert!(
            sent <= MAX_SSE_FRAME_BYTES + chunk.len(),
            "no error past the bound"
        );
    };
    assert_eq!(error.code, ErrorCode::StreamFrameTooLarge);
    assert!(!error.retryable);
    assert_eq!(error.http_status(), 502);
}

#[test]
fn exactly_4_mib_is_still_accepted_and_completes() {
    let mut parser = SseParser::new();
    let payload = "y".repeat(MAX_SSE_FRAME_BYTES - 6);
    assert!(parser.push(b"data: ").unwrap().is_empty());
    assert!(parser.push(payload.as_bytes()).unwrap().is_empty());
    let frames = parser.push(b"\n\n").unwrap();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].len(), payload.len());
}

#[test]
fn the_bound_counts_utf8_bytes() {
    // 'é' is 2 bytes (1 UTF-16 unit): 2 Mi of them fill the 4 MiB, one more goes over.
    let mut parser = SseParser::new();
    let payload = "é".repeat(2 * 1024 * 1024);
    assert!(parser.push(payload.as_bytes()).is_ok());
    let error = parser.push("é".as_bytes()).unwrap_err();
    assert_eq!(error.code, ErrorCode::StreamFrameTooLarge);
}

#[test]
fn a_complete_frame_over_4_mib_is_refused_even_in_one_chunk() {
    // 1.4 Mi CJK characters: 4.2 MB of UTF-8 but 1.4 Mi UTF-16 units (the old rule let it pass).
    let frame = format!("data: {}\n\n", "漢".repeat(1_400_000));
    let error = SseParser::new().push(frame.as_bytes()).unwrap_err();
    assert_eq!(error.code, ErrorCode::StreamFrameTooLarge);
    assert!(!error.retryable);
    // Its line before the blank line is what counts: exactly 4 MiB of it is accepted.
    let fits = format!("data: {}\n\n", "y".repeat(MAX_SSE_FRAME_BYTES - 6));
    assert_eq!(SseParser::new().push(fits.as_bytes()).unwrap().len(), 1);
}

#[test]
fn completed_frames_free_the_bound() {
    let mut parser = SseParser::new();
    let frame = format!("data: {}\n\n", "z".repeat(3 * 1024 * 1024));
    for _ in 0..3 {
        assert_eq!(parser.push(frame.as_bytes()).unwrap().len(), 1);
    }
}
