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
use super::walk::{MAX_VISITED, walk};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::permissions::{Glob, GlobMode};
use crate::provider::ToolSpec;

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
            parts.push(format!("only the first {MAX_MATCHES} matches are listed"));
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
    let pattern = input["pattern"].as_str().unwrap_or_default();
    within("pattern", pattern, MAX_PATTERN_BYTES)?;
    RegexBuilder::new(pattern)
        .case_insensitive(input["case_insensitive"].as_bool().unwrap_or(false))
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
        Some(path) => env.fs.resolve(path),
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

#[derive(Debug)]
pub struct GlobTool(pub Arc<FileEnv>);

#[async_trait]
impl Tool for GlobTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "Glob".to_owned(),
            description: "Lists files matching a glob (`*`, `**`, `?`, `[a-z]`) relative to `path` (default: the working directory).".to_owned(),
            input_schema: schema(json!({ "pattern": { "type": "string", "minLength": 1 } }), &["pattern"]),
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
        format!(
            "Find files matching {}",
            input["pattern"].as_str().unwrap_or_default()
        )
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        let root = match search_root(&self.0, &input) {
            Ok(root) => root,
            Err(error) => return failure(error),
        };
        let glob = match glob_of(&input, "pattern") {
            Ok(glob) => glob.unwrap_or_else(|| Glob::new("")),
            Err(error) => return failure(error),
        };
        // Matching 100,000 paths is blocking work too.
        let fs = self.0.fs.clone();
        let searched = tokio::task::spawn_blocking(move || {
            let walked = walk(&fs, &root);
            let matched: Vec<String> = walked
                .files
                .into_iter()
                .map(|(relative, _)| relative)
                .filter(|relative| glob.matches(relative, GlobMode::Path))
                .take(MAX_MATCHES + 1)
                .collect();
            (matched, walked.stopped_early)
        });
        let (mut matched, walk_stopped) = match searched.await {
            Ok(searched) => searched,
            Err(error) => return failure(format!("the file walk failed: {error}")),
        };
        let more_matches = matched.len() > MAX_MATCHES;
        matched.truncate(MAX_MATCHES);
        let (listing, output_cut) = truncate(&matched.join("\n"), self.0.max_output_bytes);
        let partial = Partial {
            walk_stopped,
            more_matches,
            output_cut,
            too_large: Vec::new(),
        };
        partial.finish(
            json!({ "files": listing, "count": matched.len() }),
            format!("Found {} file(s)", matched.len()),
        )
    }
}

#[derive(Debug)]
pub struct GrepTool(pub Arc<FileEnv>);

#[async_trait]
impl Tool for GrepTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "Grep".to_owned(),
            description: "Searches file contents with a regular expression under `path` (default: the working directory); `glob` filters file names. Prints `file:line:text`.".to_owned(),
            input_schema: schema(
                json!({
                    "pattern": { "type": "string", "minLength": 1 },
                    "glob": { "type": "string", "minLength": 1 },
                    "case_insensitive": { "type": "boolean" },
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
        check_root(&self.0, input)
    }

    fn approval_title(&self, input: &Value) -> String {
        format!(
            "Search for {}",
            input["pattern"].as_str().unwrap_or_default()
        )
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        let root = match search_root(&self.0, &input) {
            Ok(root) => root,
            Err(error) => return failure(error),
        };
        let regex = match compile(&input) {
            Ok(regex) => regex,
            Err(error) => return failure(error),
        };
        let filter = match glob_of(&input, "glob") {
            Ok(filter) => filter,
            Err(error) => return failure(error),
        };
        let fs = self.0.fs.clone();
        let searched = tokio::task::spawn_blocking(move || {
            let walked = walk(&fs, &root);
            let mut partial = Partial {
                walk_stopped: walked.stopped_early,
                ..Partial::default()
            };
            let mut lines = Vec::new();
            for (relative, path) in walked.files {
                if filter
                    .as_ref()
                    .is_some_and(|g| !g.matches(&relative, GlobMode::Path))
                {
                    continue;
                }
                // Opened beneath the search root without following a symlink (TOOL-04), and
                // without blocking on a FIFO swapped in (TOOL-05).
                let Some(opened) = walked.root.as_ref().and_then(|dir| {
                    open_beneath(
                        dir.as_fd(),
                        &path,
                        OFlags::RDONLY | OFlags::NONBLOCK,
                        Mode::empty(),
                    )
                    .ok()
                }) else {
                    continue;
                };
                let file = std::fs::File::from(opened);
                let Ok(meta) = file.metadata() else {
                    continue;
                };
                // Special files and hard-linked files are skipped like symlinks: another name of
                // the same file may lie outside the roots (the file tools refuse them too).
                if checked_regular(&path, &meta).is_err() {
                    continue;
                }
                if meta.len() > MAX_GREP_FILE_BYTES {
                    partial.too_large.push(relative);
                    continue;
                }
                // Binary and non-UTF-8 files are skipped.
                let Ok(text) = read_bounded(&path, file, meta.len(), MAX_GREP_FILE_BYTES)
                    .and_then(|bytes| String::from_utf8(bytes).map_err(|_| String::new()))
                else {
                    continue;
                };
                for (number, line) in text.lines().enumerate() {
                    if !regex.is_match(line) {
                        continue;
                    }
                    if lines.len() == MAX_MATCHES {
                        partial.more_matches = true;
                        return (lines, partial);
                    }
                    // A file that is one giant line must not become a giant result.
                    let shown = shorten_line(line, MAX_SHOWN_LINE_BYTES);
                    lines.push(format!("{relative}:{}:{shown}", number + 1));
                }
            }
            (lines, partial)
        })
        .await;
        let (found, mut partial) = match searched {
            Ok(searched) => searched,
            Err(error) => return failure(format!("the search failed: {error}")),
        };
        let (matches, output_cut) = truncate(&found.join("\n"), self.0.max_output_bytes);
        partial.output_cut = output_cut;
        partial.finish(
            json!({ "matches": matches, "count": found.len() }),
            format!("{} matching line(s)", found.len()),
        )
    }
}
