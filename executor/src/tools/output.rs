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

pub fn success(output: Value, summary: impl Into<String>) -> ToolOutcome {
    ToolOutcome {
        output,
        is_error: false,
        summary: summary.into(),
    }
}

/// An error result the model can read and react to.
pub fn failure(message: impl Into<String>) -> ToolOutcome {
    let message = message.into();
    ToolOutcome {
        output: json!({ "error": message }),
        is_error: true,
        summary: message,
    }
}

#[cfg(test)]
mod tests {
    use super::truncate;

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
}
