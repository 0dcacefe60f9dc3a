//! The glob patterns of permission rules and of the `Glob` tool.
//!
//! `?` is one character, `*` any run of characters, `**` any run including `/`, `[abc]` /
//! `[a-z]` / `[!a]` a character class. In [`GlobMode::Path`] `*` and `?` stop at `/` (so
//! `src/*.rs` does not reach into `src/a/b.rs`); in [`GlobMode::Text`] (command lines, URLs)
//! `*` crosses `/`, because `Bash:git *` is meant to match `git log src/main.rs`.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobMode {
    Path,
    Text,
    /// A `Bash` command line: matched like `Text`, but permission rules judge each simple
    /// command of the line on its own (see `permissions::shell`).
    Command,
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
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            let token = match c {
                '?' => Token::Any,
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    // `**/` also matches no directory at all: `src/**/a.rs` matches `src/a.rs`.
                    if chars.peek() == Some(&'/') {
                        chars.next();
                        tokens.push(Token::Dirs);
                        continue;
                    }
                    Token::DoubleStar
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
        matches_at(&self.tokens, &text, mode)
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

fn matches_at(tokens: &[Token], text: &[char], mode: GlobMode) -> bool {
    let Some((first, rest)) = tokens.split_first() else {
        return text.is_empty();
    };
    let stops_at_slash = mode == GlobMode::Path;
    match first {
        Token::DoubleStar => (0..=text.len()).any(|skip| matches_at(rest, &text[skip..], mode)),
        Token::Dirs => (0..=text.len())
            .filter(|&skip| skip == 0 || text[skip - 1] == '/')
            .any(|skip| matches_at(rest, &text[skip..], mode)),
        Token::Star => {
            for skip in 0..=text.len() {
                if matches_at(rest, &text[skip..], mode) {
                    return true;
                }
                if skip < text.len() && stops_at_slash && text[skip] == '/' {
                    return false;
                }
            }
            false
        }
        Token::Any => match text.split_first() {
            Some((c, tail)) if !(stops_at_slash && *c == '/') => matches_at(rest, tail, mode),
            _ => false,
        },
        Token::Char(expected) => match text.split_first() {
            Some((c, tail)) if c == expected => matches_at(rest, tail, mode),
            _ => false,
        },
        Token::Class { negated, ranges } => match text.split_first() {
            Some((c, tail)) => {
                let inside = ranges.iter().any(|(low, high)| (*low..=*high).contains(c));
                inside != *negated && matches_at(rest, tail, mode)
            }
            None => false,
        },
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
}
