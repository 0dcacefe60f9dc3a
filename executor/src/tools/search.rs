//! `Glob` and `Grep`: searching under a directory inside the roots. The walk never follows a
//! symlink (a link inside a root may point anywhere) and skips `.git`; it stops after
//! `MAX_VISITED` entries so a huge tree cannot stall the executor. Grep does not read files with
//! more than one hard link.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use regex::RegexBuilder;
use serde_json::{Value, json};

use super::files::FileEnv;
use super::output::{failure, success, truncate};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::permissions::{Glob, GlobMode};
use crate::provider::ToolSpec;

const MAX_VISITED: usize = 100_000;
const MAX_MATCHES: usize = 1_000;
/// Files larger than this are not searched by `Grep`.
const MAX_GREP_FILE_BYTES: u64 = 5 * 1024 * 1024;

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

/// Regular files under `root` (relative path, real path), in sorted order.
fn walk(root: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    let mut visited = 0;
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            visited += 1;
            if visited > MAX_VISITED {
                return files;
            }
            // `file_type` does not follow symlinks: links are neither descended nor read.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() && entry.file_name() != ".git" {
                pending.push(path);
            } else if kind.is_file() {
                let relative = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                files.push((relative, path));
            }
        }
    }
    files.sort();
    files
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
        let glob = Glob::new(input["pattern"].as_str().unwrap_or_default());
        let walked = tokio::task::spawn_blocking(move || walk(&root)).await;
        let files = walked.unwrap_or_default();
        let matched: Vec<String> = files
            .into_iter()
            .map(|(relative, _)| relative)
            .filter(|relative| glob.matches(relative, GlobMode::Path))
            .take(MAX_MATCHES)
            .collect();
        let (listing, truncated) = truncate(&matched.join("\n"), self.0.max_output_bytes);
        success(
            json!({ "files": listing, "count": matched.len(), "truncated": truncated || matched.len() == MAX_MATCHES }),
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
        RegexBuilder::new(input["pattern"].as_str().unwrap_or_default())
            .size_limit(1 << 20)
            .build()
            .map_err(|e| format!("invalid regular expression: {e}"))?;
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
        let regex = RegexBuilder::new(input["pattern"].as_str().unwrap_or_default())
            .case_insensitive(input["case_insensitive"].as_bool().unwrap_or(false))
            .size_limit(1 << 20)
            .build();
        let regex = match regex {
            Ok(regex) => regex,
            Err(error) => return failure(format!("invalid regular expression: {error}")),
        };
        let filter = input["glob"].as_str().map(Glob::new);
        let found = tokio::task::spawn_blocking(move || {
            let mut lines = Vec::new();
            for (relative, path) in walk(&root) {
                if filter
                    .as_ref()
                    .is_some_and(|g| !g.matches(&relative, GlobMode::Path))
                {
                    continue;
                }
                // Hard-linked files are skipped like symlinks: another name of the same file may
                // lie outside the roots (the file tools refuse them too).
                if std::fs::metadata(&path)
                    .map(|m| if m.nlink() > 1 { u64::MAX } else { m.len() })
                    .unwrap_or(u64::MAX)
                    > MAX_GREP_FILE_BYTES
                {
                    continue;
                }
                // Binary and non-UTF-8 files are skipped.
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                for (number, line) in text.lines().enumerate() {
                    if regex.is_match(line) {
                        lines.push(format!("{relative}:{}:{line}", number + 1));
                        if lines.len() == MAX_MATCHES {
                            return lines;
                        }
                    }
                }
            }
            lines
        })
        .await
        .unwrap_or_default();
        let (matches, truncated) = truncate(&found.join("\n"), self.0.max_output_bytes);
        success(
            json!({ "matches": matches, "count": found.len(), "truncated": truncated || found.len() == MAX_MATCHES }),
            format!("{} matching line(s)", found.len()),
        )
    }
}
