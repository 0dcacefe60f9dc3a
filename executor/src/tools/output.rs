//! Building tool outcomes, and truncating output that is too large for model context with a
//! marker the model (and the user) can see.

use serde_json::{Value, json};

use super::ToolOutcome;

/// Default limit of one text field of a tool's output: 30 000 bytes.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 30_000;

/// Cuts `text` to at most `limit` bytes (on a character boundary) and appends a marker saying
/// how much was left out. Returns whether it cut.
pub fn truncate(text: &str, limit: usize) -> (String, bool) {
    if text.len() <= limit {
        return (text.to_owned(), false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let omitted = text.len() - end;
    let marker =
        format!("\n[… output truncated: {omitted} more bytes not shown (limit {limit} bytes) …]");
    (format!("{}{marker}", &text[..end]), true)
}

/// Cuts one line of output to at most `limit` bytes (on a character boundary), with an inline
/// marker: unlike [`truncate`], the marker adds no line break, so line-oriented output
/// (`file:line:text`) keeps one entry per line.
pub fn shorten_line(line: &str, limit: usize) -> String {
    if line.len() <= limit {
        return line.to_owned();
    }
    let mut end = limit;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let omitted = line.len() - end;
    format!("{}[… line truncated: {omitted} more bytes …]", &line[..end])
}

/// Cuts `text` to about `limit` bytes by leaving out its middle, for messages whose end matters
/// as much as their start (a parse error quoting a huge input, then saying what is wrong).
pub fn elide_middle(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut head = limit / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - limit / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let omitted = tail - head;
    format!(
        "{}[… {omitted} bytes left out …]{}",
        &text[..head],
        &text[tail..]
    )
}

/// Now, in milliseconds since the Unix epoch (the timestamps tools put in their results).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

pub fn success(output: Value, summary: impl Into<String>) -> ToolOutcome {
    ToolOutcome {
        output,
        is_error: false,
        state: None,
        patch: None,
        context_patch: None,
        new_messages: Vec::new(),
        summary: summary.into(),
    }
}

/// An error result the model can read and react to.
pub fn failure(message: impl Into<String>) -> ToolOutcome {
    let message = message.into();
    failed(json!({ "error": message }), message)
}

/// An error result with its own output (a command's exit code and streams, a fetch's answer).
pub fn failed(output: Value, summary: impl Into<String>) -> ToolOutcome {
    ToolOutcome {
        is_error: true,
        ..success(output, summary)
    }
}

#[cfg(test)]
mod tests {
    use super::{elide_middle, shorten_line, truncate};

    #[test]
    fn truncates_on_a_char_boundary_with_a_marker() {
        assert_eq!(truncate("short", 10), ("short".to_owned(), false));
        let (text, cut) = truncate("ééééé", 5);
        assert!(cut);
        assert!(
            text.starts_with("éé\n[… output truncated: 6 more bytes"),
            "{text}"
        );
    }

    #[test]
    fn shortens_a_line_on_a_char_boundary_without_a_line_break() {
        assert_eq!(shorten_line("short", 10), "short");
        let shortened = shorten_line("ééééé", 5);
        assert_eq!(shortened, "éé[… line truncated: 6 more bytes …]");
    }

    #[test]
    fn elides_the_middle_on_char_boundaries() {
        assert_eq!(elide_middle("short", 10), "short");
        let elided = elide_middle("éééé-error: why", 10);
        assert_eq!(elided, "éé[… 10 bytes left out …]: why");
    }
}
