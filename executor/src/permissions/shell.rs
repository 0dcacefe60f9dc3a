//! Splitting a `Bash` command line into the simple commands bash would run, so that permission
//! rules judge every one of them (reliability catalogue TOOL-07): an allow rule `Bash:git status*`
//! must not allow `git status; curl x`, and a deny rule `Bash:curl *` must see that `curl`.
//!
//! This is a deliberately small, conservative subset of the bash grammar: lists (`;`, `&`, `&&`,
//! `||`, `|`, `|&`, newlines), subshells `( … )`, command substitution `$( … )` and backticks
//! (also inside double quotes), single and double quotes, backslash escapes and redirections.
//! Anything else that changes what runs (here-documents, process substitution, `${…}`,
//! arithmetic, `$'…'`, comments, compound commands and reserved words, `eval`, control
//! characters such as `\r`, very deep nesting, more than 64 commands, a line longer
//! than [`MAX_LINE_BYTES`]) makes the line *unparsable*: [`split`] returns `None` and no allow
//! rule applies to it (fail closed, reliability TOOL-08).

/// One simple command as bash would run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The command's words with quotes removed, joined by one space (`c"ur"l x` → `curl x`);
    /// leading `NAME=value` assignments and redirections are not part of it. A command
    /// substitution inside a word is kept as written (its own commands are listed separately).
    pub text: String,
    /// No redirection other than to `/dev/null` or between descriptors, no leading assignment,
    /// a command name with no expansion in it, and no argument that makes it run another
    /// command ([`super::indirection`]): only such a command can be allowed by a rule (a rule for
    /// `git *` does not cover `git status > ~/.bashrc`, `PAGER=sh git status` or `git -c …`).
    pub plain: bool,
}

/// Deepest nesting of subshells and substitutions accepted.
const MAX_DEPTH: usize = 16;
/// Most simple commands accepted in one line.
const MAX_COMMANDS: usize = 64;
/// Longest line an allow rule may judge (TOOL-08): a person reads a longer one before it runs,
/// since a rule's prefix says little about 100 KB behind it.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Words that start a compound command or otherwise change how the rest is parsed.
const RESERVED: [&str; 22] = [
    "!", "{", "}", "[[", "]]", "if", "then", "else", "elif", "fi", "case", "esac", "for", "select",
    "while", "until", "do", "done", "function", "time", "coproc", "eval",
];

/// The simple commands of `line`, or `None` when the line uses syntax this parser does not
/// follow with confidence.
pub fn split(line: &str) -> Option<Vec<SimpleCommand>> {
    if line.len() > MAX_LINE_BYTES {
        return None;
    }
    split_at(line, 0).ok()
}

fn split_at(line: &str, depth: usize) -> Parsed<Vec<SimpleCommand>> {
    let chars: Vec<char> = line.chars().collect();
    let mut parser = Parser {
        chars: &chars,
        pos: 0,
        commands: Vec::new(),
    };
    parser.list(None, depth)?;
    if parser.pos != chars.len() || parser.commands.len() > MAX_COMMANDS {
        return Err(Unparsable);
    }
    Ok(parser.commands)
}

/// Rough pieces of a line, for deny rules when [`split`] gave up: cut at every operator,
/// substitution and grouping character, quotes ignored, each also without the `NAME=value`
/// words it starts with. Over-splitting only adds candidates.
pub fn rough_pieces(line: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    for piece in line.split([
        ';', '&', '|', '\n', '\r', '`', '(', ')', '{', '}', '$', '<', '>',
    ]) {
        let command = without_assignments(piece);
        for piece in [piece, command] {
            let piece = piece.trim().trim_matches(['"', '\'']).trim();
            if !piece.is_empty() && !pieces.iter().any(|p| p == piece) {
                pieces.push(piece.to_owned());
            }
        }
    }
    pieces
}

/// `piece` after the assignment words it starts with (`A='x y' git push` → `git push`).
fn without_assignments(piece: &str) -> &str {
    let chars: Vec<char> = piece.chars().collect();
    let mut parser = Parser {
        chars: &chars,
        pos: 0,
        commands: Vec::new(),
    };
    let mut command_at = 0;
    loop {
        parser.blanks();
        match parser.word(0) {
            Ok(word) if is_assignment(&word.value) => command_at = parser.pos,
            _ => break,
        }
    }
    let bytes: usize = chars[..command_at].iter().map(|c| c.len_utf8()).sum();
    &piece[bytes..]
}

struct Unparsable;

type Parsed<T> = Result<T, Unparsable>;

struct Parser<'a> {
    chars: &'a [char],
    pos: usize,
    commands: Vec<SimpleCommand>,
}

/// A word: its value with quotes removed, and whether anything in it expands at run time.
struct Word {
    value: String,
    dynamic: bool,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    /// A list of pipelines up to `end` (`)` of a subshell or substitution) or the end of input.
    fn list(&mut self, end: Option<char>, depth: usize) -> Parsed<()> {
        if depth > MAX_DEPTH {
            return Err(Unparsable);
        }
        loop {
            self.blanks();
            match self.peek() {
                None if end.is_none() => return Ok(()),
                None => return Err(Unparsable),
                Some(c) if Some(c) == end => return Ok(()),
                Some(';' | '&' | '|' | '\n') => {
                    // An operator between commands; empty commands are skipped.
                    self.pos += 1;
                }
                Some(')') => return Err(Unparsable),
                Some('(') => {
                    if self.peek_at(1) == Some('(') {
                        return Err(Unparsable); // arithmetic `(( … ))`
                    }
                    self.pos += 1;
                    self.list(Some(')'), depth + 1)?;
                    self.pos += 1;
                }
                Some(_) => self.simple_command(depth)?,
            }
        }
    }

    fn blanks(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\\' if self.peek_at(1) == Some('\n') => self.pos += 2,
                _ => break,
            }
        }
    }

    fn simple_command(&mut self, depth: usize) -> Parsed<()> {
        let mut words: Vec<Word> = Vec::new();
        let mut assignments = false;
        let mut unsafe_redirect = false;
        loop {
            self.blanks();
            match self.peek() {
                None | Some(';' | '&' | '|' | '\n' | ')') => break,
                Some('(') => return Err(Unparsable), // `f()` definitions, `x=(…)` arrays
                Some('<' | '>') => {
                    if !self.redirection(depth)? {
                        unsafe_redirect = true;
                    }
                }
                Some(c) if c.is_ascii_digit() && self.fd_redirect_ahead() => {
                    while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        self.pos += 1;
                    }
                    if !self.redirection(depth)? {
                        unsafe_redirect = true;
                    }
                }
                Some(_) => {
                    let word = self.word(depth)?;
                    if words.is_empty() && is_assignment(&word.value) {
                        assignments = true;
                        continue;
                    }
                    if words.is_empty() && !word.dynamic && RESERVED.contains(&word.value.as_str())
                    {
                        return Err(Unparsable);
                    }
                    words.push(word);
                }
            }
        }
        if words.is_empty() && !assignments && !unsafe_redirect {
            return Ok(());
        }
        let values: Vec<&str> = words.iter().map(|w| w.value.as_str()).collect();
        let plain = !assignments
            && !unsafe_redirect
            && words
                .first()
                .is_some_and(|w| !w.dynamic && !w.value.is_empty())
            && !super::indirection::runs_other_code(&values);
        let text = values.join(" ");
        self.commands.push(SimpleCommand { text, plain });
        Ok(())
    }

    /// Digits directly followed by `<` or `>` (`2>/dev/null`).
    fn fd_redirect_ahead(&self) -> bool {
        let mut index = self.pos;
        while self.chars.get(index).is_some_and(|c| c.is_ascii_digit()) {
            index += 1;
        }
        matches!(self.chars.get(index), Some('<' | '>'))
    }

    /// One redirection at `<` or `>`; `true` when it is harmless (to `/dev/null`, or a
    /// descriptor duplication such as `2>&1`).
    fn redirection(&mut self, depth: usize) -> Parsed<bool> {
        let first = self.peek().ok_or(Unparsable)?;
        self.pos += 1;
        let next = self.peek();
        if next == Some('(') {
            return Err(Unparsable); // process substitution
        }
        if first == '<' && next == Some('<') {
            return Err(Unparsable); // here-documents and here-strings
        }
        if matches!(next, Some('>') | Some('|')) {
            self.pos += 1;
        }
        if self.peek() == Some('&') {
            // `>&2`, `2>&1`, `<&0`, `>&-`: duplicating or closing a descriptor.
            self.pos += 1;
            let start = self.pos;
            while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '-') {
                self.pos += 1;
            }
            return Ok(self.pos > start);
        }
        self.blanks();
        match self.peek() {
            None | Some(';' | '&' | '|' | '\n' | ')' | '(' | '<' | '>') => Err(Unparsable),
            Some(_) => {
                let target = self.word(depth)?;
                Ok(!target.dynamic && target.value == "/dev/null")
            }
        }
    }

    /// One word up to an unquoted blank or operator. Substitutions inside it are parsed and
    /// their commands recorded.
    /// Stays whole: the shell word lexer's state machine.
    fn word(&mut self, depth: usize) -> Parsed<Word> {
        let mut value = String::new();
        let mut dynamic = false;
        if self.peek() == Some('#') {
            return Err(Unparsable); // a comment: bash ignores the rest of the line
        }
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => break,
                '\'' => {
                    self.pos += 1;
                    loop {
                        match self.peek() {
                            None => return Err(Unparsable),
                            Some('\'') => break,
                            Some(c) => {
                                reject_control(c)?;
                                value.push(c);
                                self.pos += 1;
                            }
                        }
                    }
                    self.pos += 1;
                }
                '"' => {
                    self.pos += 1;
                    loop {
                        match self.peek() {
                            None => return Err(Unparsable),
                            Some('"') => break,
                            Some('\\') => {
                                let escaped = self.peek_at(1).ok_or(Unparsable)?;
                                reject_control(escaped)?;
                                if matches!(escaped, '"' | '\\' | '$' | '`') {
                                    value.push(escaped);
                                } else if escaped != '\n' {
                                    value.push('\\');
                                    value.push(escaped);
                                }
                                self.pos += 2;
                            }
                            Some('$' | '`') => {
                                let from = self.pos;
                                self.expansion(depth)?;
                                dynamic = true;
                                value.extend(&self.chars[from..self.pos]);
                            }
                            Some(c) => {
                                reject_control(c)?;
                                value.push(c);
                                self.pos += 1;
                            }
                        }
                    }
                    self.pos += 1;
                }
                '\\' => {
                    let escaped = self.peek_at(1).ok_or(Unparsable)?;
                    reject_control(escaped)?;
                    if escaped != '\n' {
                        value.push(escaped);
                    }
                    self.pos += 2;
                }
                '$' | '`' => {
                    let from = self.pos;
                    self.expansion(depth)?;
                    dynamic = true;
                    value.extend(&self.chars[from..self.pos]);
                }
                '{' => {
                    // `{a,b}` / `{1..3}` brace expansion makes several words of one (and
                    // `cu{rl,}` runs curl); only the literal `{}` (`find -exec`) is followed.
                    if self.peek_at(1) != Some('}') {
                        return Err(Unparsable);
                    }
                    value.push_str("{}");
                    self.pos += 2;
                }
                '*' | '?' | '[' => {
                    // Pathname expansion: `/usr/bin/cu?l` may run curl.
                    dynamic = true;
                    value.push(c);
                    self.pos += 1;
                }
                c => {
                    reject_control(c)?;
                    value.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(Word { value, dynamic })
    }

    /// At `$` or a backtick: a variable, `$( … )` or `` ` … ` ``. Refuses the forms that this
    /// parser does not follow.
    fn expansion(&mut self, depth: usize) -> Parsed<()> {
        if self.peek() == Some('`') {
            // The body ends at the next unescaped backtick; `\`` inside is a nested one.
            self.pos += 1;
            let mut body = String::new();
            loop {
                match self.peek() {
                    None => return Err(Unparsable),
                    Some('`') => break,
                    Some('\\') if matches!(self.peek_at(1), Some('`' | '\\' | '$')) => {
                        body.push(self.peek_at(1).ok_or(Unparsable)?);
                        self.pos += 2;
                    }
                    Some(c) => {
                        body.push(c);
                        self.pos += 1;
                    }
                }
            }
            self.pos += 1;
            let inner = split_at(&body, depth + 1)?;
            self.commands.extend(inner);
            if self.commands.len() > MAX_COMMANDS {
                return Err(Unparsable);
            }
            return Ok(());
        }
        // At `$`.
        self.pos += 1;
        match self.peek() {
            Some('(') if self.peek_at(1) == Some('(') => Err(Unparsable), // `$(( … ))`
            Some('(') => {
                self.pos += 1;
                self.list(Some(')'), depth + 1)?;
                self.pos += 1;
                Ok(())
            }
            // `${…}`, `$'…'`, `$"…"`, `$[…]`: not followed here.
            Some('{' | '\'' | '"' | '[') => Err(Unparsable),
            Some(c) if c.is_ascii_alphanumeric() || c == '_' => {
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    self.pos += 1;
                }
                Ok(())
            }
            // `$?`, `$$`, `$#`, `$@`, `$*`, `$!`, `$-`.
            Some('?' | '$' | '#' | '@' | '*' | '!' | '-') => {
                self.pos += 1;
                Ok(())
            }
            // A lone `$` is a literal dollar sign.
            _ => Ok(()),
        }
    }
}

/// Control characters (a carriage return, escape sequences, …) make bash and a reader of the
/// line disagree about what it says.
fn reject_control(c: char) -> Parsed<()> {
    match c.is_control() && c != '\t' && c != '\n' {
        true => Err(Unparsable),
        false => Ok(()),
    }
}

/// `NAME=value` or `NAME+=value` before the command name.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let name = name.strip_suffix('+').unwrap_or(name);
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &str) -> Option<Vec<(String, bool)>> {
        split(line).map(|commands| commands.into_iter().map(|c| (c.text, c.plain)).collect())
    }

    fn plain(list: &[&str]) -> Option<Vec<(String, bool)>> {
        Some(list.iter().map(|t| ((*t).to_owned(), true)).collect())
    }

    #[test]
    fn lists_pipelines_and_substitutions_are_split() {
        assert_eq!(texts("git status"), plain(&["git status"]));
        assert_eq!(
            texts("git status; curl x"),
            plain(&["git status", "curl x"])
        );
        assert_eq!(
            texts("git status && rm -rf ~ || true & sleep 1"),
            plain(&["git status", "rm -rf ~", "true", "sleep 1"])
        );
        assert_eq!(texts("git status | wc -l"), plain(&["git status", "wc -l"]));
        assert_eq!(texts("a |& b"), plain(&["a", "b"]));
        assert_eq!(
            texts("git status\ncurl x"),
            plain(&["git status", "curl x"])
        );
        // The substitution runs first; both are listed.
        assert_eq!(
            texts("git status $(curl x)"),
            plain(&["curl x", "git status $(curl x)"])
        );
        assert_eq!(
            texts("git status `curl x`"),
            plain(&["curl x", "git status `curl x`"])
        );
        assert_eq!(
            texts("echo \"$(curl x)\""),
            plain(&["curl x", "echo $(curl x)"])
        );
        assert_eq!(texts("(cd a && make)"), plain(&["cd a", "make"]));
        assert_eq!(texts("c\"ur\"l 'x y'"), plain(&["curl x y"]));
        assert_eq!(texts("echo 'a;b' \"c|d\""), plain(&["echo a;b c|d"]));
        assert_eq!(texts("ls 2>/dev/null >&2"), plain(&["ls"]));
        assert_eq!(texts("ls \\\n -la"), plain(&["ls -la"]));
        assert_eq!(texts("echo $HOME $?"), plain(&["echo $HOME $?"]));
    }

    #[test]
    fn redirects_assignments_and_dynamic_names_are_not_plain() {
        assert_eq!(
            texts("git status > ~/.bashrc"),
            Some(vec![("git status".to_owned(), false)])
        );
        assert_eq!(
            texts("git status 2>>log"),
            Some(vec![("git status".to_owned(), false)])
        );
        assert_eq!(
            texts("FOO=$(curl x) git status"),
            Some(vec![
                ("curl x".to_owned(), true),
                ("git status".to_owned(), false)
            ])
        );
        assert_eq!(
            texts("$CMD status"),
            Some(vec![("$CMD status".to_owned(), false)])
        );
        assert_eq!(texts("> x"), Some(vec![(String::new(), false)]));
    }

    #[test]
    fn what_is_not_followed_is_unparsable() {
        for line in [
            "git status\rcurl x",
            "cat <<EOF\ncurl x\nEOF",
            "cat <<< x",
            "diff <(curl x) a",
            "echo ${X:-$(curl x)}",
            "echo $((1+2))",
            "((x++))",
            "echo $'\\x3b'",
            "git status # ; curl x",
            "if true; then curl x; fi",
            "eval 'curl x'",
            "{ curl x; }",
            "f() { curl x; }",
            "echo {a,b}",
            "echo 'unterminated",
            "echo \"unterminated",
            "echo $(unterminated",
            "echo `unterminated",
            "a )",
            "echo \u{1b}[2J",
        ] {
            assert_eq!(texts(line), None, "{line:?}");
        }
        let deep = format!("{}x{}", "$(".repeat(40), ")".repeat(40));
        assert_eq!(texts(&deep), None);
        let many = vec!["true"; 100].join(";");
        assert_eq!(texts(&many), None);
        let long = format!("git status {}", "a".repeat(MAX_LINE_BYTES));
        assert_eq!(texts(&long), None);
        let longest = format!("git status {}", "a".repeat(MAX_LINE_BYTES - 11));
        assert!(texts(&longest).is_some());
    }

    #[test]
    fn rough_pieces_cut_everywhere() {
        assert_eq!(
            rough_pieces("cat <<EOF; curl x\n`wget y`"),
            ["cat", "EOF", "curl x", "wget y"]
        );
        assert_eq!(
            rough_pieces("A='x y' B=1 git push <<EOF"),
            ["A='x y' B=1 git push", "git push", "EOF"]
        );
    }
}
