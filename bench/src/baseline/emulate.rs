//! The baseline's stand-in for a request: the demo provider's plan, appended as pre-rendered SSE
//! frames (`content` deltas, then a `result`), paced like the demo provider when asked to.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::{EventEnvelope, EventType, ProtocolVersion, StreamMessage};
use agent_runtime::timefmt::format_iso_ms;
use bytes::Bytes;

use super::Log;

/// What a submitted input asks for, read the way the demo provider reads it.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    deltas: Vec<String>,
    interval: Option<Duration>,
    stamp: bool,
}

fn plan(input: &str) -> Plan {
    match number_after(input, "demo:deltas=") {
        Some(count) => Plan {
            deltas: (1..=count.clamp(1, 100_000))
                .map(|index| format!("delta-{index}"))
                .collect(),
            interval: number_after(input, "demo:interval=")
                .filter(|&ms| ms > 0)
                .map(Duration::from_millis),
            stamp: input.contains("demo:stamp"),
        },
        None => {
            let mut deltas = vec!["[demo] You said: ".to_owned()];
            deltas.extend(input.split_inclusive(' ').map(str::to_owned));
            Plan {
                deltas,
                interval: None,
                stamp: false,
            }
        }
    }
}

fn number_after(text: &str, key: &str) -> Option<u64> {
    let start = text.find(key)? + key.len();
    let digits: String = text[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

fn unix_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros())
}

/// Runs the plan of `input` on `log` in a task of its own.
pub fn start_request(log: Arc<Log>, request_id: String, input: String) {
    tokio::spawn(async move {
        let plan = plan(&input);
        // The demo provider's schedule: fixed, a late delta goes out at once, stamped with its
        // time on the schedule.
        let started = (tokio::time::Instant::now(), unix_micros());
        for (index, delta) in plan.deltas.into_iter().enumerate() {
            let offset = plan.interval.map_or(Duration::ZERO, |period| {
                period.saturating_mul(u32::try_from(index).unwrap_or(u32::MAX))
            });
            if plan.interval.is_some() {
                tokio::time::sleep_until(started.0 + offset).await;
            }
            let delta = if plan.stamp {
                let stamp = match plan.interval {
                    Some(_) => started.1 + offset.as_micros(),
                    None => unix_micros(),
                };
                format!("{delta}@{stamp} ")
            } else if delta.ends_with(' ') {
                delta
            } else {
                format!("{delta} ")
            };
            let message = StreamMessage::content(log.session_id.clone(), delta);
            log.append(|sequence| frame(&log.session_id, &request_id, sequence, &message));
        }
        let end = StreamMessage::success(log.session_id.clone());
        log.append(|sequence| frame(&log.session_id, &request_id, sequence, &end));
    });
}

/// The SSE frame of one event, as the gateway renders it.
fn frame(session_id: &str, request_id: &str, sequence: u64, message: &StreamMessage) -> Bytes {
    let envelope = EventEnvelope {
        protocol_version: ProtocolVersion,
        event_id: nanoid(),
        sequence,
        session_id: session_id.to_owned(),
        request_id: Some(request_id.to_owned()),
        occurred_at: format_iso_ms(now_ms()),
        event_type: EventType::SessionStream,
        data: message.to_data().into(),
        rendered: Default::default(),
    };
    let data = serde_json::to_string(&envelope).expect("an event envelope always serialises");
    Bytes::from(format!(
        "id: {sequence}\nevent: {}\ndata: {data}\n\n",
        envelope.event_type.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inputs_like_the_demo_provider() {
        let paced = plan("demo:deltas=3 demo:interval=5 demo:stamp");
        assert_eq!(paced.deltas, ["delta-1", "delta-2", "delta-3"]);
        assert_eq!(paced.interval, Some(Duration::from_millis(5)));
        assert!(paced.stamp);
        let echo = plan("hello there");
        assert_eq!(echo.deltas, ["[demo] You said: ", "hello ", "there"]);
        assert_eq!(echo.interval, None);
    }
}
