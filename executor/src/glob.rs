//! The glob patterns of permission rules and of the `Glob` tool.
//!
//! `?` is one character, `*` any run of characters, `**` any run including `/`, `[abc]` /
//! `[a-z]` / `[!a]` a character class. In [`GlobMode::Path`] `*` and `?` stop at `/` (so
//! `src/*.rs` does not reach into `src/a/b.rs`); in [`GlobMode::Text`] (command lines, URLs)
//! `*` crosses `/`, because `Bash:git *` is meant to match `git log src/main.rs`.
//!
//! Matching walks the pattern once, keeping the set of text positions the pattern so far can
//! reach: time is the pattern's length times the text's, with no backtracking and no recursion.
//! The `Glob` tool takes patterns from the model, and a backtracking matcher is exponential in the
//! number of `*`s (`**a**a…**b`) and recurses once per token (RES-09).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobMode {
    Path,
    Text,
    /// A `Bash` command line: matched like `Text`, but permission rules judge each simple
    /// command of the line on its own (see `permissions::shell`).
    Command,
    /// A URL (`WebFetch`): matched like `Text`, against each reading of the URL a server may
    /// take (see `permissions::url`).
    Url,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Char(char),
    Any,
    Star,
    DoubleStar,
    /// `**/`: no directory, or any run of directories.
    Dirs,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A compiled glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    source: String,
    tokens: Vec<Token>,
}

impl Glob {
    pub fn new(pattern: &str) -> Self {
        let mut tokens = Vec::new();
        for token in tokenize(pattern) {
            push_token(&mut tokens, token);
        }
        Self {
            source: pattern.to_owned(),
            tokens,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn matches(&self, text: &str, mode: GlobMode) -> bool {
        let text: Vec<char> = text.chars().collect();
        matches_all(&self.tokens, &text, mode)
    }
}

/// The tokens of `pattern`, one per wildcard or character.
fn tokenize(pattern: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        let token = match c {
            '?' => Token::Any,
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                // `**/` also matches no directory at all: `src/**/a.rs` matches `src/a.rs`.
                if chars.peek() == Some(&'/') {
                    chars.next();
                    Token::Dirs
                } else {
                    Token::DoubleStar
                }
            }
            '*' => Token::Star,
            '[' => match class(&mut chars) {
                Some(class) => class,
                None => Token::Char('['),
            },
            other => Token::Char(other),
        };
        tokens.push(token);
    }
    tokens
}

/// Appends `token`, merged into the wildcard before it when together they match what one of
/// them does (`***` is `**`, `**/**/` is `**/`). A `*` is never followed by another wildcard
/// (`**` would have been read instead), so between two tokens that consume a character there are
/// then at most two wildcards (`**/*`): once the pattern has consumed more characters than the
/// text has, no position is reachable and matching stops, however long the pattern.
fn push_token(tokens: &mut Vec<Token>, token: Token) {
    use Token::{Dirs, DoubleStar, Star};
    let merged = match (tokens.last(), &token) {
        (Some(DoubleStar), DoubleStar | Star | Dirs) | (Some(Dirs), DoubleStar) => DoubleStar,
        (Some(Dirs), Dirs) => Dirs,
        _ => {
            tokens.push(token);
            return;
        }
    };
    if let Some(last) = tokens.last_mut() {
        *last = merged;
    }
}

fn class(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<Token> {
    let rest: String = chars.clone().collect();
    let end = rest.char_indices().skip(1).find(|&(_, c)| c == ']')?.0;
    let body: Vec<char> = rest[..end].chars().collect();
    for _ in 0..=body.len() {
        chars.next();
    }
    let (negated, body) = match body.first() {
        Some('!') | Some('^') => (true, &body[1..]),
        _ => (false, &body[..]),
    };
    let mut ranges = Vec::new();
    let mut index = 0;
    while index < body.len() {
        if index + 2 < body.len() && body[index + 1] == '-' {
            ranges.push((body[index], body[index + 2]));
            index += 3;
        } else {
            ranges.push((body[index], body[index]));
            index += 1;
        }
    }
    Some(Token::Class { negated, ranges })
}

/// Whether `tokens` match all of `text`. `reach[i]`: the tokens so far match exactly
/// `text[..i]`.
fn matches_all(tokens: &[Token], text: &[char], mode: GlobMode) -> bool {
    let stops_at_slash = mode == GlobMode::Path;
    let mut reach = vec![false; text.len() + 1];
    reach[0] = true;
    let mut next = vec![false; text.len() + 1];
    for token in tokens {
        next.fill(false);
        match token {
            Token::DoubleStar => {
                if let Some(first) = reach.iter().position(|reached| *reached) {
                    next[first..].fill(true);
                }
            }
            Token::Dirs => {
                // Nothing, or any run of characters that ends with `/`.
                let mut reached_before = false;
                for end in 0..=text.len() {
                    next[end] = reach[end] || (reached_before && text[end - 1] == '/');
                    reached_before |= reach[end];
                }
            }
            Token::Star => {
                // Any run of characters, up to (not over) the next `/` in path mode.
                let mut open = false;
                for end in 0..=text.len() {
                    open |= reach[end];
                    next[end] = open;
                    if stops_at_slash && text.get(end) == Some(&'/') {
                        open = false;
                    }
                }
            }
            Token::Any | Token::Char(_) | Token::Class { .. } => {
                for (start, c) in text.iter().enumerate() {
                    next[start + 1] = reach[start] && accepts(token, *c, stops_at_slash);
                }
            }
        }
        std::mem::swap(&mut reach, &mut next);
        if !reach.contains(&true) {
            return false;
        }
    }
    reach[text.len()]
}

/// Whether a token that consumes one character accepts `c`.
fn accepts(token: &Token, c: char, stops_at_slash: bool) -> bool {
    match token {
        Token::Any => !(stops_at_slash && c == '/'),
        Token::Char(expected) => c == *expected,
        Token::Class { negated, ranges } => {
            let inside = ranges.iter().any(|(low, high)| (*low..=*high).contains(&c));
            inside != *negated
        }
        Token::Star | Token::DoubleStar | Token::Dirs => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_text_modes() {
        let cases = [
            ("src/*.rs", "src/main.rs", GlobMode::Path, true),
            ("src/*.rs", "src/a/b.rs", GlobMode::Path, false),
            ("src/**/*.rs", "src/a/b.rs", GlobMode::Path, true),
            ("src/**/*.rs", "src/b.rs", GlobMode::Path, true),
            ("**", "/etc/passwd", GlobMode::Path, true),
            ("/work/**", "/work/x/y", GlobMode::Path, true),
            ("*.[ch]", "a.c", GlobMode::Path, true),
            ("*.[!ch]", "a.c", GlobMode::Path, false),
            ("file?.txt", "file1.txt", GlobMode::Path, true),
            ("git *", "git log src/main.rs", GlobMode::Text, true),
            ("git *", "rm -rf /", GlobMode::Text, false),
            (
                "https://example.com/*",
                "https://example.com/a/b",
                GlobMode::Text,
                true,
            ),
        ];
        for (pattern, text, mode, expected) in cases {
            assert_eq!(
                Glob::new(pattern).matches(text, mode),
                expected,
                "{pattern} ~ {text}"
            );
        }
    }

    /// The backtracking matcher this module used before RES-09: exponential on some patterns,
    /// but simple enough to trust as the definition of a match on small inputs.
    fn reference(tokens: &[Token], text: &[char], mode: GlobMode) -> bool {
        let Some((first, rest)) = tokens.split_first() else {
            return text.is_empty();
        };
        let stops_at_slash = mode == GlobMode::Path;
        match first {
            Token::DoubleStar => (0..=text.len()).any(|skip| reference(rest, &text[skip..], mode)),
            Token::Dirs => (0..=text.len())
                .filter(|&skip| skip == 0 || text[skip - 1] == '/')
                .any(|skip| reference(rest, &text[skip..], mode)),
            Token::Star => {
                for skip in 0..=text.len() {
                    if reference(rest, &text[skip..], mode) {
                        return true;
                    }
                    if skip < text.len() && stops_at_slash && text[skip] == '/' {
                        return false;
                    }
                }
                false
            }
            Token::Any => match text.split_first() {
                Some((c, tail)) if !(stops_at_slash && *c == '/') => reference(rest, tail, mode),
                _ => false,
            },
            Token::Char(expected) => match text.split_first() {
                Some((c, tail)) if c == expected => reference(rest, tail, mode),
                _ => false,
            },
            Token::Class { negated, ranges } => match text.split_first() {
                Some((c, tail)) => {
                    let inside = ranges.iter().any(|(low, high)| (*low..=*high).contains(c));
                    inside != *negated && reference(rest, tail, mode)
                }
                None => false,
            },
        }
    }

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn pick<'a>(&mut self, from: &'a [&'a str]) -> &'a str {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let n = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % from.len() as u64;
            from[usize::try_from(n).unwrap()]
        }
    }

    #[test]
    fn matches_like_the_backtracking_matcher_on_random_small_cases() {
        let pattern_parts = [
            "a", "b", "/", "*", "**", "**/", "?", "[ab]", "[!a]", "[", "]", "-",
        ];
        let text_parts = ["a", "b", "/", "-", "[", "]"];
        let mut rng = Rng(0x676c_6f62);
        for case in 0..20_000 {
            let pattern: String = (0..case % 7).map(|_| rng.pick(&pattern_parts)).collect();
            let text: String = (0..case % 9).map(|_| rng.pick(&text_parts)).collect();
            // Unmerged tokens, matched by backtracking: the meaning before RES-09.
            let tokens = tokenize(&pattern);
            let chars: Vec<char> = text.chars().collect();
            let glob = Glob::new(&pattern);
            for mode in [GlobMode::Path, GlobMode::Text] {
                assert_eq!(
                    glob.matches(&text, mode),
                    reference(&tokens, &chars, mode),
                    "{pattern} ~ {text} ({mode:?})"
                );
            }
        }
    }
}
