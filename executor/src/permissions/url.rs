//! The readings of a URL subject (`WebFetch`) that permission rules match (reliability TOOL-25).
//!
//! Servers disagree on what path a URL names: one merges `//`, another strips `;jsessionid`
//! parameters from each segment (so `/..;/` climbs), another decodes `%2F` before routing. A
//! rule's pattern is matched against each reading: a `deny` or `ask` rule that matches any of
//! them decides, and an `allow` rule allows only when it matches all of them. Scheme and host are
//! already lowercase (the URL parser's doing); the fragment, never sent, and an empty query are
//! dropped. Every reading removes dot segments, merges repeated slashes, decodes percent-escaped
//! unreserved characters (`%61` is `a`) and writes the other escapes in upper case.

/// The distinct readings of `text`; `text` alone when it is not a URL.
pub(super) fn readings(text: &str) -> Vec<String> {
    let Ok(url) = reqwest::Url::parse(text) else {
        return vec![text.to_owned()];
    };
    let Some(host) = url.host_str() else {
        return vec![text.to_owned()];
    };
    let mut origin = format!("{}://{host}", url.scheme());
    if let Some(port) = url.port() {
        origin.push_str(&format!(":{port}"));
    }
    let query = url
        .query()
        .filter(|q| !q.is_empty())
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let mut readings: Vec<String> = Vec::with_capacity(4);
    for strip_parameters in [false, true] {
        for decode_all in [false, true] {
            let path = canonical_path(url.path(), strip_parameters, decode_all);
            let reading = format!("{origin}{path}{query}");
            if !readings.contains(&reading) {
                readings.push(reading);
            }
        }
    }
    readings
}

/// `path` with its segments normalised: `;…` cut from each when `strip_parameters` (Tomcat,
/// Jetty, Spring), every escape decoded first when `decode_all` (a server that decodes `%2F`
/// before routing), then empty and `.` segments dropped and `..` applied.
fn canonical_path(path: &str, strip_parameters: bool, decode_all: bool) -> String {
    let path = if decode_all {
        String::from_utf8_lossy(&percent_decode(path, |_| true)).into_owned()
    } else {
        normalise_escapes(path)
    };
    let mut segments: Vec<&str> = Vec::new();
    let mut ends_in_directory = false;
    for raw in path.split('/').skip(1) {
        let segment = match raw.split_once(';') {
            Some((name, _)) if strip_parameters => name,
            _ => raw,
        };
        ends_in_directory = matches!(segment, "" | "." | "..");
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            name => segments.push(name),
        }
    }
    let mut canonical = format!("/{}", segments.join("/"));
    if ends_in_directory && !segments.is_empty() {
        canonical.push('/');
    }
    canonical
}

/// `%XX` of an unreserved character (RFC 3986 §2.3) decoded; every other escape kept, with its
/// hex digits in upper case (§6.2.2.1), so `%2f` and `%2F` read alike.
fn normalise_escapes(path: &str) -> String {
    let bytes = percent_decode(path, |byte| {
        byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)
    });
    let mut text = String::with_capacity(bytes.len());
    let mut rest = bytes.as_slice();
    while let Some((&byte, tail)) = rest.split_first() {
        match tail {
            [high, low, ..] if byte == b'%' && hex(*high).is_some() && hex(*low).is_some() => {
                text.push('%');
                text.push(char::from(high.to_ascii_uppercase()));
                text.push(char::from(low.to_ascii_uppercase()));
                rest = &tail[2..];
            }
            _ => {
                // The parser left only ASCII in the path: other bytes arrive escaped.
                text.push(char::from(byte));
                rest = tail;
            }
        }
    }
    text
}

/// `text` with each `%XX` whose byte `decode` accepts replaced by that byte.
fn percent_decode(text: &str, decode: impl Fn(u8) -> bool) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%'
            && let (Some(high), Some(low)) = (
                bytes.get(index + 1).copied().and_then(hex),
                bytes.get(index + 2).copied().and_then(hex),
            )
            && decode(high * 16 + low)
        {
            decoded.push(high * 16 + low);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    decoded
}

fn hex(digit: u8) -> Option<u8> {
    char::from(digit)
        .to_digit(16)
        .and_then(|value| u8::try_from(value).ok())
}

#[cfg(test)]
mod tests {
    use super::readings;

    #[test]
    fn spellings_of_one_path_read_alike() {
        for spelling in [
            "https://h.test/admin",
            "https://h.test//admin",
            "https://h.test/%61dmin",
            "https://h.test/%2561dmin/../admin",
            "https://h.test/./admin",
            "https://h.test/x/%2e%2E/admin",
            "https://H.TEST:443/admin#top",
            "https://h.test/admin?",
        ] {
            assert!(
                readings(spelling).contains(&"https://h.test/admin".to_owned()),
                "{spelling}: {:?}",
                readings(spelling)
            );
        }
        assert_eq!(
            readings("https://h.test/;/admin"),
            ["https://h.test/;/admin", "https://h.test/admin"]
        );
        assert_eq!(
            readings("https://h.test/public/..%2fsecret?q=%2F"),
            [
                "https://h.test/public/..%2Fsecret?q=%2F",
                "https://h.test/secret?q=%2F"
            ]
        );
        assert_eq!(
            readings("https://h.test/a;v=1/..;/b/"),
            ["https://h.test/a;v=1/..;/b/", "https://h.test/b/"]
        );
        assert_eq!(readings("http://h.test:8080"), ["http://h.test:8080/"]);
        assert_eq!(readings("not a url"), ["not a url"]);
    }
}
