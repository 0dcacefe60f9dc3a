//! `Glob` and `Grep`: searching under a directory inside the roots, over the bounded walk of
//! [`super::walk`]. Grep does not read files with more than one hard link, nor files over
//! [`MAX_GREP_FILE_BYTES`], and shows at most [`MAX_SHOWN_LINE_BYTES`] of a matching line, so a
//! file that is one giant line costs a bounded output. Whenever a limit cuts a result short, the
//! result says `truncated` and which limit in `notice` (RES-09).

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use regex::{Regex, RegexBuilder};
use rustix::fs::{Mode, OFlags};
use serde_json::{Value, json};

use super::files::FileEnv;
use super::fs::open_beneath;
use super::output::{elide_middle, failure, shorten_line, success, truncate};
use super::regular_file::{checked_regular, read_bounded};
use super::walk::{MAX_VISITED, Walk, walk};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::glob::{Glob, GlobMode};
use crate::provider::ToolSpec;
use crate::tools::text;

const MAX_MATCHES: usize = 1_000;
/// Files larger than this are not searched by `Grep` (and the result names them).
const MAX_GREP_FILE_BYTES: u64 = 5 * 1024 * 1024;
/// The most of one matching line `Grep` shows; the rest is replaced by a marker.
const MAX_SHOWN_LINE_BYTES: usize = 2_000;
/// How many of the files too large to search a result names.
const MAX_NAMED_SKIPS: usize = 10;
/// Compiled size limit of a `Grep` pattern, so a huge or exploding pattern (`(a{1000}){1000}`) is
/// an error instead of a multi-gigabyte automaton.
const MAX_REGEX_BYTES: usize = 1 << 20;
/// The most of a pattern error `Grep` answers.
const MAX_ERROR_BYTES: usize = 1_000;
/// Longest `Grep` pattern. Parsing is linear in the pattern but holds a syntax tree about a
/// hundred times its size (a 1 MiB pattern peaked at 105 MB) before the size limit can refuse it.
const MAX_PATTERN_BYTES: usize = 64 * 1024;
/// Longest glob (`Glob`'s pattern, `Grep`'s filter): the longest path there is.
const MAX_GLOB_BYTES: usize = 4096;

/// Which limits cut a search short. The model is told, so that a part of the answer does not
/// read as all of it.
#[derive(Debug, Default)]
struct Partial {
    walk_stopped: bool,
    more_matches: bool,
    /// How many matches the answer lists at most, when not [`MAX_MATCHES`].
    match_limit: Option<usize>,
    output_cut: bool,
    too_large: Vec<String>,
}

impl Partial {
    fn notice(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.walk_stopped {
            parts.push(format!(
                "the search stopped after {MAX_VISITED} directory entries, so files beyond them were not looked at; narrow `path` or the pattern"
            ));
        }
        if self.more_matches {
            let limit = self.match_limit.unwrap_or(MAX_MATCHES);
            parts.push(format!("only the first {limit} matches are listed"));
        }
        if self.output_cut {
            parts.push("the listing was cut to the output limit".to_owned());
        }
        if !self.too_large.is_empty() {
            let shown = self.too_large.len().min(MAX_NAMED_SKIPS);
            let more = self.too_large.len() - shown;
            let mut named = self.too_large[..shown].join(", ");
            if more > 0 {
                named.push_str(&format!(" and {more} more"));
            }
            parts.push(format!(
                "{} file(s) over {MAX_GREP_FILE_BYTES} bytes were not searched: {named}",
                self.too_large.len()
            ));
        }
        (!parts.is_empty()).then(|| format!("Partial result: {}.", parts.join("; ")))
    }

    /// Adds `truncated` (and `notice` when cut) to `output`, and says so in the summary.
    fn finish(&self, mut output: Value, summary: String) -> ToolOutcome {
        let notice = self.notice();
        output["truncated"] = Value::Bool(notice.is_some());
        let summary = match notice {
            Some(notice) => {
                output["notice"] = Value::String(notice);
                format!("{summary} (partial)")
            }
            None => summary,
        };
        success(output, summary)
    }
}

/// Compiles the `Grep` pattern of `input` under [`MAX_REGEX_BYTES`]. A syntax error quotes the
/// whole pattern, so a long error is cut in the middle, keeping the reason at its end.
fn compile(input: &Value) -> Result<Regex, String> {
    let pattern = text(input, "pattern");
    within("pattern", pattern, MAX_PATTERN_BYTES)?;
    let insensitive = input["-i"]
        .as_bool()
        .or(input["case_insensitive"].as_bool());
    let multiline = input["multiline"].as_bool().unwrap_or(false);
    RegexBuilder::new(pattern)
        .case_insensitive(insensitive.unwrap_or(false))
        .multi_line(multiline)
        .dot_matches_new_line(multiline)
        .size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|error| {
            let error = elide_middle(&error.to_string(), MAX_ERROR_BYTES);
            format!("invalid regular expression: {error}")
        })
}

/// The glob in `input[field]`, if any, refused when it is longer than any path.
fn glob_of(input: &Value, field: &str) -> Result<Option<Glob>, String> {
    let Some(glob) = input[field].as_str() else {
        return Ok(None);
    };
    within(field, glob, MAX_GLOB_BYTES)?;
    Ok(Some(Glob::new(glob)))
}

fn within(field: &str, text: &str, limit: usize) -> Result<(), String> {
    if text.len() > limit {
        return Err(format!(
            "`{field}` is {} bytes long; the limit is {limit} bytes",
            text.len()
        ));
    }
    Ok(())
}

fn search_root(env: &FileEnv, input: &Value) -> Result<PathBuf, String> {
    match input.get("path").and_then(Value::as_str) {
        Some(path) => env.fs.resolve("path", path),
        None => Ok(env.fs.cwd().to_path_buf()),
    }
}

fn check_root(env: &FileEnv, input: &Value) -> Result<ToolCheck, String> {
    let root = search_root(env, input)?;
    let shown = root.display().to_string();
    Ok(ToolCheck {
        subject: Some(shown.clone()),
        affected_paths: vec![shown],
    })
}

fn schema(extra: Value, required: &[&str]) -> Value {
    let mut properties = json!({ "path": { "type": "string", "minLength": 1 } });
    if let (Some(target), Some(extra)) = (properties.as_object_mut(), extra.as_object()) {
        target.extend(extra.clone());
    }
    json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
}

/// `Glob`'s default `max_results`.
const DEFAULT_GLOB_RESULTS: usize = 100;

#[derive(Debug)]
pub struct GlobTool(pub Arc<FileEnv>);

#[async_trait]
impl Tool for GlobTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "Glob".to_owned(),
            description:
                "Lists files matching a glob (`*`, `**`, `?`, `[a-z]`) relative to `path` \
                (default: the working directory), in name order: at most `max_results` (default \
                100), directories too with `include_directories`, ignoring case unless \
                `case_sensitive`."
                    .to_owned(),
            input_schema: schema(
                json!({
                    "pattern": { "type": "string", "minLength": 1 },
                    "max_results": { "type": "integer", "minimum": 1, "maximum": MAX_MATCHES },
                    "include_directories": { "type": "boolean" },
                    "case_sensitive": { "type": "boolean" },
                }),
                &["pattern"],
            ),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        glob_of(input, "pattern")?;
        check_root(&self.0, input)
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Find files matching {}", text(input, "pattern"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let root = match search_root(&self.0, &input) {
            Ok(root) => root,
            Err(error) => return failure(error),
        };
        context.say(format!("Searching {}", root.display()));
        let case_sensitive = input["case_sensitive"].as_bool().unwrap_or(false);
        let pattern = text(&input, "pattern");
        if let Err(error) = within("pattern", pattern, MAX_GLOB_BYTES) {
            return failure(error);
        }
        let glob = match case_sensitive {
            true => Glob::new(pattern),
            false => Glob::new(&pattern.to_lowercase()),
        };
        let limit = input["max_results"]
            .as_u64()
            .map_or(DEFAULT_GLOB_RESULTS, |n| (n as usize).clamp(1, MAX_MATCHES));
        let with_dirs = input["include_directories"].as_bool().unwrap_or(false);
        // Matching 100,000 paths is blocking work too.
        let fs = self.0.fs.clone();
        let searched = tokio::task::spawn_blocking(move || {
            let walked = walk(&fs, &root);
            let dirs = match with_dirs {
                true => walked.dirs,
                false => Vec::new(),
            };
            // Files before directories, each in name order.
            let matched: Vec<String> = walked
                .files
                .into_iter()
                .chain(dirs)
                .map(|(relative, _)| relative)
                .filter(|relative| match case_sensitive {
                    true => glob.matches(relative, GlobMode::Path),
                    false => glob.matches(&relative.to_lowercase(), GlobMode::Path),
                })
                .take(limit + 1)
                .collect();
            (matched, walked.stopped_early)
        });
        let (mut matched, walk_stopped) = match searched.await {
            Ok(searched) => searched,
            Err(error) => return failure(format!("the file walk failed: {error}")),
        };
        let more_matches = matched.len() > limit;
        matched.truncate(limit);
        let (listing, output_cut) = truncate(&matched.join("\n"), self.0.max_output_bytes);
        let partial = Partial {
            walk_stopped,
            more_matches,
            match_limit: Some(limit),
            output_cut,
            too_large: Vec::new(),
        };
        partial.finish(
            json!({ "files": listing, "count": matched.len() }),
            format!("Found {} file(s)", matched.len()),
        )
    }
}

/// `Grep`'s `type`: the file name extensions of a language or format (ripgrep's names).
const FILE_TYPES: [(&str, &[&str]); 22] = [
    ("rust", &["rs"]),
    ("js", &["js", "mjs", "cjs", "jsx"]),
    ("ts", &["ts", "tsx", "mts", "cts"]),
    ("py", &["py", "pyi"]),
    ("go", &["go"]),
    ("java", &["java"]),
    ("kotlin", &["kt", "kts"]),
    ("c", &["c", "h"]),
    ("cpp", &["cpp", "cc", "cxx", "hpp", "hh", "hxx", "h"]),
    ("cs", &["cs"]),
    ("rb", &["rb"]),
    ("php", &["php"]),
    ("swift", &["swift"]),
    ("sh", &["sh", "bash", "zsh"]),
    ("md", &["md", "markdown"]),
    ("json", &["json"]),
    ("yaml", &["yaml", "yml"]),
    ("toml", &["toml"]),
    ("html", &["html", "htm"]),
    ("css", &["css", "scss", "less"]),
    ("sql", &["sql"]),
    ("txt", &["txt"]),
];

fn file_type(input: &Value) -> Result<Option<&'static [&'static str]>, String> {
    let Some(name) = input["type"].as_str() else {
        return Ok(None);
    };
    FILE_TYPES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, extensions)| Some(*extensions))
        .ok_or_else(|| {
            let known: Vec<&str> = FILE_TYPES.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown file type {name:?}; known types: {}",
                known.join(", ")
            )
        })
}

/// How `Grep` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OutputMode {
    /// Matching lines (with context lines when asked).
    Content,
    /// The files with a match (the default).
    FilesWithMatches,
    /// Matches per file.
    Count,
}

/// What one `Grep` call asks besides its pattern.
#[derive(Clone, Copy, Debug)]
struct GrepOptions {
    mode: OutputMode,
    line_numbers: bool,
    before: usize,
    after: usize,
    multiline: bool,
}

impl GrepOptions {
    fn of(input: &Value) -> GrepOptions {
        let mode = match input["output_mode"].as_str() {
            Some("content") => OutputMode::Content,
            Some("count") => OutputMode::Count,
            _ => OutputMode::FilesWithMatches,
        };
        let context = |key: &str| input[key].as_u64().map(|n| n.min(100) as usize);
        let both = context("-C").unwrap_or(0);
        GrepOptions {
            mode,
            line_numbers: input["-n"].as_bool().unwrap_or(true),
            before: context("-B").unwrap_or(both),
            after: context("-A").unwrap_or(both),
            multiline: input["multiline"].as_bool().unwrap_or(false),
        }
    }
}

/// The 0-based numbers of the lines of `text` a match touches (every line a multiline match
/// spans), in order.
fn matching_lines(regex: &Regex, text: &str, multiline: bool) -> Vec<usize> {
    if !multiline {
        return text
            .lines()
            .enumerate()
            .filter(|(_, line)| regex.is_match(line))
            .map(|(number, _)| number)
            .collect();
    }
    let starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(at, _)| at + 1))
        .collect();
    let line_of = |offset: usize| starts.partition_point(|&start| start <= offset) - 1;
    let mut lines = Vec::new();
    for found in regex.find_iter(text) {
        let last = line_of(found.end().saturating_sub(1).max(found.start()));
        for line in line_of(found.start())..=last {
            if lines.last() != Some(&line) {
                lines.push(line);
            }
        }
    }
    lines
}

/// The content-mode lines of one file: each match as `file:N:text` (`file:text` without line
/// numbers), context lines as `file-N-text`, and `--` between groups that do not touch.
fn content_lines(
    relative: &str,
    text: &str,
    matched: &[usize],
    options: GrepOptions,
) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let is_match: std::collections::HashSet<usize> = matched.iter().copied().collect();
    let mut shown = Vec::new();
    let mut last_shown: Option<usize> = None;
    for &number in matched {
        let from = number.saturating_sub(options.before);
        let to = (number + options.after).min(lines.len().saturating_sub(1));
        let start = match last_shown {
            Some(last) if from <= last => last + 1,
            Some(_) => {
                // Groups are told apart only when context lines are shown (as ripgrep does).
                if options.before > 0 || options.after > 0 {
                    shown.push("--".to_owned());
                }
                from
            }
            None => from,
        };
        for index in start..=to {
            let separator = if is_match.contains(&index) { ':' } else { '-' };
            let line = shorten_line(
                lines.get(index).copied().unwrap_or_default(),
                MAX_SHOWN_LINE_BYTES,
            );
            shown.push(match options.line_numbers {
                true => format!("{relative}{separator}{}{separator}{line}", index + 1),
                false => format!("{relative}{separator}{line}"),
            });
        }
        last_shown = Some(to.max(last_shown.unwrap_or(0)));
    }
    shown
}

/// What one `Grep` call looks for.
struct GrepQuery {
    regex: Regex,
    filter: Option<Glob>,
    extensions: Option<&'static [&'static str]>,
    options: GrepOptions,
}

impl GrepQuery {
    /// The answer's entries, the matches counted, and what was left out.
    fn search(&self, walked: &Walk) -> (Vec<String>, usize, Partial) {
        let mut partial = Partial {
            walk_stopped: walked.stopped_early,
            ..Partial::default()
        };
        let mut entries = Vec::new();
        let mut total = 0usize;
        for (relative, path) in &walked.files {
            if !self.wants(relative) {
                continue;
            }
            let Some(text) = searchable_text(walked, relative, path, &mut partial) else {
                continue;
            };
            let mut matched = matching_lines(&self.regex, &text, self.options.multiline);
            if matched.is_empty() {
                continue;
            }
            if total + matched.len() > MAX_MATCHES {
                matched.truncate(MAX_MATCHES - total);
                partial.more_matches = true;
            }
            total += matched.len();
            match self.options.mode {
                OutputMode::Content => {
                    entries.extend(content_lines(relative, &text, &matched, self.options));
                }
                OutputMode::FilesWithMatches => entries.push(relative.clone()),
                OutputMode::Count => entries.push(format!("{relative}:{}", matched.len())),
            }
            if partial.more_matches {
                break;
            }
        }
        (entries, total, partial)
    }

    /// Whether the file at `relative` passes the `glob` and `type` filters.
    fn wants(&self, relative: &str) -> bool {
        if self
            .filter
            .as_ref()
            .is_some_and(|g| !g.matches(relative, GlobMode::Path))
        {
            return false;
        }
        let extension = std::path::Path::new(relative)
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        self.extensions
            .is_none_or(|known| known.contains(&extension))
    }
}

/// The text of a file to search: `None` for one that cannot be opened safely, is not a regular
/// file, is binary or not UTF-8, or is too large (noted in `partial`).
fn searchable_text(
    walked: &Walk,
    relative: &str,
    path: &std::path::Path,
    partial: &mut Partial,
) -> Option<String> {
    // Opened beneath the search root without following a symlink (TOOL-04), and without
    // blocking on a FIFO swapped in (TOOL-05).
    let opened = walked.root.as_ref().and_then(|dir| {
        open_beneath(
            dir.as_fd(),
            path,
            OFlags::RDONLY | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .ok()
    })?;
    let file = std::fs::File::from(opened);
    let meta = file.metadata().ok()?;
    // Special files and hard-linked files are skipped like symlinks: another name of the same
    // file may lie outside the roots (the file tools refuse them too).
    checked_regular(path, &meta).ok()?;
    if meta.len() > MAX_GREP_FILE_BYTES {
        partial.too_large.push(relative.to_owned());
        return None;
    }
    read_bounded(path, file, meta.len(), MAX_GREP_FILE_BYTES)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

#[derive(Debug)]
pub struct GrepTool(pub Arc<FileEnv>);

#[async_trait]
impl Tool for GrepTool {
    fn spec(&self) -> ToolSpec {
        let count = json!({ "type": "integer", "minimum": 0 });
        ToolSpec {
            name: "Grep".to_owned(),
            description: "Searches file contents with a regular expression under `path` (default: \
                the working directory). `glob` filters file names, `type` by language (rust, js, \
                py, …). `output_mode`: files_with_matches (default: the files), content (the \
                lines, `file:line:text`, with `-A`/`-B`/`-C` context and `-n` line numbers), or \
                count. `-i` ignores case; `multiline` lets a match span lines; `offset` and \
                `head_limit` page through the answer."
                .to_owned(),
            input_schema: schema(
                json!({
                    "pattern": { "type": "string", "minLength": 1 },
                    "glob": { "type": "string", "minLength": 1 },
                    "type": { "type": "string", "minLength": 1 },
                    "output_mode": { "type": "string", "enum": ["content", "files_with_matches", "count"] },
                    "-i": { "type": "boolean" },
                    "case_insensitive": { "type": "boolean" },
                    "-n": { "type": "boolean" },
                    "-A": count,
                    "-B": count,
                    "-C": count,
                    "head_limit": { "type": "integer", "minimum": 1 },
                    "offset": count,
                    "multiline": { "type": "boolean" },
                }),
                &["pattern"],
            ),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        compile(input)?;
        glob_of(input, "glob")?;
        file_type(input)?;
        check_root(&self.0, input)
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Search for {}", text(input, "pattern"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let root = match search_root(&self.0, &input) {
            Ok(root) => root,
            Err(error) => return failure(error),
        };
        context.say(format!("Searching {}", root.display()));
        let regex = match compile(&input) {
            Ok(regex) => regex,
            Err(error) => return failure(error),
        };
        let filter = match glob_of(&input, "glob") {
            Ok(filter) => filter,
            Err(error) => return failure(error),
        };
        let extensions = match file_type(&input) {
            Ok(extensions) => extensions,
            Err(error) => return failure(error),
        };
        let query = GrepQuery {
            regex,
            filter,
            extensions,
            options: GrepOptions::of(&input),
        };
        let options = query.options;
        let fs = self.0.fs.clone();
        let searched = tokio::task::spawn_blocking(move || query.search(&walk(&fs, &root))).await;
        let (entries, total, mut partial) = match searched {
            Ok(searched) => searched,
            Err(error) => return failure(format!("the search failed: {error}")),
        };
        let offset = input["offset"].as_u64().unwrap_or(0) as usize;
        let head = input["head_limit"]
            .as_u64()
            .map_or(usize::MAX, |n| n as usize);
        let page: Vec<String> = entries.into_iter().skip(offset).take(head).collect();
        let (text, output_cut) = truncate(&page.join("\n"), self.0.max_output_bytes);
        partial.output_cut = output_cut;
        let (key, mode, summary) = match options.mode {
            OutputMode::Content => ("matches", "content", format!("{total} matching line(s)")),
            OutputMode::FilesWithMatches => (
                "files",
                "files_with_matches",
                format!("{} file(s) with matches", page.len()),
            ),
            OutputMode::Count => ("counts", "count", format!("{total} match(es)")),
        };
        let mut output = json!({ "mode": mode, "count": total });
        output[key] = Value::String(text);
        partial.finish(output, summary)
    }
}
