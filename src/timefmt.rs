//! ISO-8601 timestamps as the protocol writes them: UTC with milliseconds, e.g.
//! `2026-08-25T00:00:00.000Z`.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

/// Formats epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.sssZ`.
pub fn format_iso_ms(epoch_ms: u64) -> String {
    let nanos = i128::from(epoch_ms) * 1_000_000;
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let format =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    at.format(&format)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".to_owned())
}

/// Parses an ISO-8601 date-time with an offset (RFC 3339) into epoch milliseconds.
pub fn parse_iso_ms(value: &str) -> Option<i64> {
    let at = OffsetDateTime::parse(value, &Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Whether `value` is an ISO-8601 date-time with an offset.
pub fn is_iso_datetime(value: &str) -> bool {
    parse_iso_ms(value).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_milliseconds_and_zulu() {
        assert_eq!(format_iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_iso_ms(1_756_080_000_123), "2025-08-25T00:00:00.123Z");
    }

    #[test]
    fn round_trips_and_rejects_garbage() {
        let text = format_iso_ms(1_756_080_000_123);
        assert_eq!(parse_iso_ms(&text), Some(1_756_080_000_123));
        assert!(is_iso_datetime("2026-08-25T00:00:00+02:00"));
        assert!(!is_iso_datetime("invalid"));
        assert!(!is_iso_datetime("2026-08-25"));
    }
}
