use serde_json::{Value, json};

use super::{EventBound, MIN_EVENT_BYTES, escaped_len, json_len};
use agent_runtime::protocol::JsonObject;

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

fn bound() -> EventBound {
    EventBound::new(MIN_EVENT_BYTES)
}

#[test]
fn escaped_lengths_match_what_serde_json_writes() {
    let text = "plain \"quoted\" \\ back\nline\ttab \u{1} \u{1f} \u{7f} é 漢字 🦀 \r\u{8}\u{c}";
    assert_eq!(
        escaped_len(text),
        serde_json::to_string(text).unwrap().len()
    );
}

#[test]
fn a_long_delta_is_split_into_events_that_each_fit_and_lose_nothing() {
    // CJK (3 bytes each), escapes (2 and 6 bytes) and emoji (4 bytes) across the cut points.
    let delta: String = "漢字\"\u{1}🦀x".repeat(40_000);
    let data = object(json!({ "type": "content", "sessionId": "s1", "delta": delta }));
    let events = bound().fit(data);
    assert!(events.len() > 1);
    let mut joined = String::new();
    for event in &events {
        assert!(json_len(event) <= MIN_EVENT_BYTES, "{}", json_len(event));
        assert_eq!(event["type"], "content");
        assert_eq!(event["sessionId"], "s1");
        joined.push_str(event["delta"].as_str().unwrap());
    }
    assert!(joined == delta, "the pieces join to the delta");
}

#[test]
fn a_long_answer_is_cut_with_a_marker() {
    let content = "答".repeat(100_000);
    let data = object(
        json!({ "type": "result", "sessionId": "s1", "subtype": "success", "content": content }),
    );
    let [event] = bound().fit(data).try_into().unwrap();
    assert!(json_len(&event) <= MIN_EVENT_BYTES);
    let text = event["content"].as_str().unwrap();
    assert!(text.starts_with("答答答"));
    assert!(
        text.ends_with(&format!(
            "more bytes left out: one event carries at most {MIN_EVENT_BYTES} bytes …]"
        )),
        "{}",
        &text[text.len() - 120..]
    );
}

#[test]
fn a_tool_input_that_does_not_fit_is_shown_as_a_marker() {
    let input = json!({ "file_path": "/w/a.txt", "content": "x".repeat(200_000) });
    let data = object(
        json!({ "type": "tool_use", "sessionId": "s1", "id": "c1", "name": "Write", "input": input }),
    );
    let [event] = bound().fit(data).try_into().unwrap();
    assert_eq!(event["id"], "c1");
    let omitted = event["input"]["omitted"].as_str().unwrap();
    assert!(omitted.starts_with("[… 200"), "{omitted}");
}

#[test]
fn structured_tool_output_becomes_cut_text_and_small_events_are_untouched() {
    let output = json!({ "rows": (0..40_000).collect::<Vec<u32>>() });
    let data = object(
        json!({ "type": "tool_result", "sessionId": "s1", "id": "c1", "name": "mcp__db__query", "output": output, "isError": false }),
    );
    let [event] = bound().fit(data).try_into().unwrap();
    assert!(json_len(&event) <= MIN_EVENT_BYTES);
    assert!(
        event["output"]
            .as_str()
            .unwrap()
            .starts_with("{\"rows\":[0,1,2")
    );

    let small = object(json!({ "type": "content", "sessionId": "s1", "delta": "hi" }));
    assert_eq!(bound().fit(small.clone()), vec![small]);
}

#[test]
fn many_small_items_are_halved_and_what_cannot_shrink_is_left_out() {
    let messages: Vec<Value> = (0..20_000)
        .map(|n| json!({ "role": "user", "content": n.to_string() }))
        .collect();
    let data = object(
        json!({ "type": "tool_new_messages", "sessionId": "s1", "id": "c1", "name": "T", "messages": messages }),
    );
    let [event] = bound().fit(data).try_into().unwrap();
    assert!(json_len(&event) <= MIN_EVENT_BYTES);
    assert!(!event["messages"].as_array().unwrap().is_empty());

    let fields: JsonObject = (0..20_000)
        .map(|n| (format!("k{n}"), Value::from(n)))
        .collect();
    let data = object(
        json!({ "type": "tool_runtime_patch", "sessionId": "s1", "id": "c1", "name": "T", "patch": fields }),
    );
    let [event] = bound().fit(data).try_into().unwrap();
    assert_eq!(event["type"], "error");
    assert_eq!(event["code"], "EVENT_TOO_LARGE");
    assert_eq!(event["sessionId"], "s1");
}
