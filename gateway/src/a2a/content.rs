//! A2A messages and our content (docs/protocols.md §2.2): the parts of a user's message as the
//! input of a request, the transcript of a task as its `history`, and the answer to an
//! approval.

use agent_runtime::protocol::content::{ContentPart, ImageUrl, UserContent};
use agent_runtime_store::TranscriptEntry;
use serde_json::{Value, json};

use crate::projected::message_text;

/// The input a message's parts make: text parts as text, `data` parts as their JSON text, image
/// parts (by URL or raw bytes) as images; other parts are left out. `None` when nothing is left.
pub fn user_content(parts: &[Value]) -> Option<UserContent> {
    let parts: Vec<ContentPart> = parts.iter().filter_map(content_part).collect();
    match parts.as_slice() {
        [] => None,
        [ContentPart::Text { text, .. }] => Some(UserContent::Text(text.clone())),
        _ => Some(UserContent::Parts(parts)),
    }
}

fn content_part(part: &Value) -> Option<ContentPart> {
    let text = |text: String| ContentPart::Text {
        text,
        provider_options: None,
    };
    if let Some(value) = part.get("text").and_then(Value::as_str) {
        return Some(text(value.to_owned()));
    }
    if let Some(data) = part.get("data") {
        return Some(text(data.to_string()));
    }
    let media = part
        .get("mediaType")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !media.starts_with("image/") {
        return None;
    }
    let url = match (part.get("url"), part.get("raw")) {
        (Some(Value::String(url)), _) => url.clone(),
        (_, Some(Value::String(raw))) => format!("data:{media};base64,{raw}"),
        _ => return None,
    };
    (!url.is_empty()).then_some(ContentPart::ImageUrl {
        image_url: ImageUrl { url },
    })
}

/// The answer to an approval a message carries: a `data` part `{approved, reason?, scope?}`, or
/// text, which approves when it is `yes`, `y`, `approve`, `approved`, `allow` or `ok` and denies
/// otherwise (the text is then the reason).
pub fn approval(parts: &[Value]) -> (bool, Option<String>, Option<String>) {
    let data = parts.iter().find_map(|part| part.get("data"));
    if let Some(approved) = data
        .and_then(|data| data.get("approved"))
        .and_then(Value::as_bool)
    {
        let field = |name: &str| {
            data.and_then(|data| data.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        return (approved, field("reason"), field("scope"));
    }
    let text: String = parts
        .iter()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    let word = text
        .trim()
        .trim_end_matches(['.', '!'])
        .to_ascii_lowercase();
    let approved = matches!(
        word.as_str(),
        "yes" | "y" | "approve" | "approved" | "allow" | "ok"
    );
    let reason = (!approved && !text.trim().is_empty()).then(|| text.trim().to_owned());
    (approved, reason, None)
}

/// The messages of one request in the transcript, as A2A messages: the user's inputs (those the
/// transcript correlates with the request) and the agent's answers after them, up to the next
/// request's input (tool traffic left out); the newest `limit` of them.
pub fn history(entries: &[TranscriptEntry], request_id: &str, limit: Option<usize>) -> Vec<Value> {
    let mut in_request = false;
    let mut messages = Vec::new();
    for entry in entries {
        let message = &entry.message;
        let role = match message.get("role").and_then(Value::as_str) {
            Some("user") => {
                let owner = message
                    .get("correlation")
                    .and_then(|correlation| correlation.get("requestId"))
                    .and_then(Value::as_str);
                in_request = owner == Some(request_id);
                "ROLE_USER"
            }
            Some("assistant") => "ROLE_AGENT",
            _ => continue,
        };
        let text = message_text(message.get("content"));
        if !in_request || text.is_empty() {
            continue;
        }
        let id = message
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or(&entry.id);
        messages.push(json!({"messageId": id, "role": role, "parts": [{"text": text}]}));
    }
    let skip = limit.map_or(0, |limit| messages.len().saturating_sub(limit));
    messages.into_iter().skip(skip).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_become_input_and_answers() {
        let parts = [
            json!({"text": "look"}),
            json!({"url": "https://x/y.png", "mediaType": "image/png"}),
            json!({"url": "https://x/a.mp3", "mediaType": "audio/mpeg"}),
        ];
        let Some(UserContent::Parts(input)) = user_content(&parts) else {
            panic!("parts");
        };
        assert_eq!(input.len(), 2);
        assert_eq!(
            user_content(&[json!({"text": "hi"})]),
            Some(UserContent::Text("hi".into()))
        );
        assert_eq!(user_content(&[json!({"url": "https://x/a.mp3"})]), None);

        assert_eq!(approval(&[json!({"text": "Yes."})]), (true, None, None));
        assert_eq!(
            approval(&[json!({"text": "not now"})]),
            (false, Some("not now".into()), None)
        );
        let data = [json!({"data": {"approved": true, "scope": "session"}})];
        assert_eq!(approval(&data), (true, None, Some("session".into())));
    }
}
