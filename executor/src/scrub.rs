//! Text from outside with the credentials a URL may carry cut out (secrets themselves are
//! [`agent_runtime::secret::Secret`]).

/// `text` with every URL in it cut to its scheme, host, port and path: user information, query
/// and fragment may carry credentials (`?api_key=…`), so text from outside (a transport
/// error naming the URL it failed on) can be logged and shown.
pub fn scrub_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = find_url(rest) {
        out.push_str(&rest[..start]);
        let url = &rest[start..];
        let end = url
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | '<' | '>' | '`' | ')')
            })
            .unwrap_or(url.len());
        let (scheme, after) = url[..end].split_once("://").unwrap_or(("", &url[..end]));
        let (authority, tail) = after
            .find(['/', '?', '#'])
            .map_or((after, ""), |at| after.split_at(at));
        let host = authority.rsplit('@').next().unwrap_or(authority);
        let path = tail.split(['?', '#']).next().unwrap_or_default();
        out.push_str(scheme);
        out.push_str("://");
        if authority.contains('@') {
            out.push_str("…@");
        }
        out.push_str(host);
        out.push_str(path);
        if path.len() < tail.len() {
            out.push('…');
        }
        rest = &url[end..];
    }
    out.push_str(rest);
    out
}

/// Where the next `scheme://` begins (a run of letters, digits, `+`, `-` and `.` before `://`).
fn find_url(text: &str) -> Option<usize> {
    let separator = text.find("://")?;
    let start = text[..separator]
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .map_or(0, |at| at + 1);
    if start == separator {
        // `://` with no scheme: not a URL; look past it.
        return find_url(&text[separator + 3..]).map(|at| at + separator + 3);
    }
    Some(start)
}

#[cfg(test)]
mod tests {
    use super::scrub_urls;

    #[test]
    fn urls_lose_credentials_query_and_fragment() {
        assert_eq!(
            scrub_urls("error sending request for url (http://127.0.0.1:9/mcp?api_key=k1#f)"),
            "error sending request for url (http://127.0.0.1:9/mcp…)"
        );
        assert_eq!(
            scrub_urls("a https://user:pw@host.test/p and wss://h?t=1 end"),
            "a https://…@host.test/p and wss://h… end"
        );
        assert_eq!(scrub_urls("no url: ://x http:"), "no url: ://x http:");
        // Inside a JSON string the escaped quote stays whole.
        assert_eq!(
            scrub_urls(r#"{"m":"url: \"http://h:1/p?k=v\", more"}"#),
            r#"{"m":"url: \"http://h:1/p…\", more"}"#
        );
        assert_eq!(
            scrub_urls("plain https://h.test/a/b"),
            "plain https://h.test/a/b"
        );
    }
}
