//! `docs/configuration.md` against the code, both ways, so the reference cannot go stale:
//!
//! * every key it lists is accepted by the real loader, and every key the loader accepts (read
//!   off the loader's own types) is listed;
//! * every default written as a value is the code's default: setting it changes nothing;
//! * every TOML block of the page and the example configurations of `deploy/` load with the real,
//!   strict loader (the TOML embedded in the Kubernetes manifests: `kubernetes.rs`);
//! * every flag and environment variable of every subcommand is listed with its default, and
//!   every variable the code reads is listed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agent_runtime_cli::config::{ServeConfig, accepted_keys};
use agent_runtime_cli::{Cli, ServeArgs};
use agent_runtime_gateway::AuthMode;
use clap::CommandFactory;

pub(super) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(super) fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn reference() -> String {
    read("docs/configuration.md")
}

/// Loads a TOML text with the loader every process uses.
fn load(toml: &str) -> anyhow::Result<ServeConfig> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, toml).unwrap();
    ServeConfig::load(&ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    })
}

pub(super) fn load_ok(toml: &str, what: &str) -> ServeConfig {
    load(toml).unwrap_or_else(|error| panic!("{what} does not load: {error:#}\n{toml}"))
}

/// The cells of a Markdown table row (`\|` is a literal bar inside a cell).
fn cells(line: &str) -> Option<Vec<String>> {
    let line = line.trim();
    if !line.starts_with('|') {
        return None;
    }
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line[1..].chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            other => cell.push(other),
        }
    }
    Some(cells)
}

/// The text of the first code span of a cell, when the cell starts with one.
fn leading_code(cell: &str) -> Option<&str> {
    let rest = cell.strip_prefix('`')?;
    rest.split('`').next()
}

/// Documented file keys (first cell a dotted key in backticks) → their default cell. A row
/// `prefix.section.*` (a profile's sections) stands for every documented `section.` key under
/// `prefix.`.
fn documented_keys(doc: &str) -> BTreeMap<String, String> {
    let mut keys = BTreeMap::new();
    let mut wildcards = Vec::new();
    for row in doc.lines().filter_map(cells) {
        let Some(key) = row.first().and_then(|cell| leading_code(cell)) else {
            continue;
        };
        let is_key = key.contains('.')
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.[]*".contains(c));
        if let Some(prefixed) = key.strip_suffix(".*").filter(|_| is_key) {
            wildcards.push((prefixed.to_owned(), row.get(2).cloned().unwrap_or_default()));
        } else if is_key {
            let default = row.get(2).cloned().unwrap_or_default();
            assert!(
                keys.insert(key.to_owned(), default).is_none(),
                "{key} is listed twice"
            );
        }
    }
    for (wildcard, default) in wildcards {
        let (prefix, section) = wildcard.rsplit_once('.').expect("prefix.section.*");
        let expanded: Vec<(String, String)> = keys
            .keys()
            .filter(|key| key.starts_with(&format!("{section}.")))
            .map(|key| (format!("{prefix}.{key}"), default.clone()))
            .collect();
        assert!(
            !expanded.is_empty(),
            "{wildcard}.* names no documented section"
        );
        keys.extend(expanded);
    }
    keys
}

fn toml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim()) {
            (None, "```toml") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_key_the_loader_accepts_is_documented_and_every_documented_key_is_accepted() {
    let documented: BTreeSet<String> = documented_keys(&reference()).into_keys().collect();
    let accepted: BTreeSet<String> = accepted_keys().into_iter().collect();
    let undocumented: Vec<_> = accepted.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    assert!(
        undocumented.is_empty(),
        "keys the loader accepts but docs/configuration.md does not list: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "keys docs/configuration.md lists but the loader refuses: {unknown:?}"
    );
}

/// The smallest file in which a key of `table` may be set on its own.
fn base_for(table: &str) -> String {
    match table {
        "auth.jwt" => "[auth]\nmode = \"jwt\"\n\n[auth.jwt]\nalgorithm = \"HS256\"\nsecret_env = \"JWT_SECRET\"\n".to_owned(),
        "auth.trusted_headers" => {
            "[auth]\nmode = \"trusted_headers\"\n\n[auth.trusted_headers]\n".to_owned()
        }
        "audit" => "[audit]\npath = \"-\"\n".to_owned(),
        other => format!("[{other}]\n"),
    }
}

#[test]
fn documented_defaults_are_the_code_defaults() {
    let mut checked = 0;
    for (key, default_cell) in documented_keys(&reference()) {
        // Only defaults written as a value; "none", "required", "per kind" … are prose.
        let Some(value) = leading_code(&default_cell) else {
            continue;
        };
        assert!(
            !key.contains("[]"),
            "{key}: entries of a list have no default value"
        );
        let (table, leaf) = key.rsplit_once('.').unwrap();
        let base = base_for(table);
        let with_default = format!("{base}{leaf} = {value}\n");
        let expected = format!("{:?}", load_ok(&base, &format!("the base of {key}")));
        let got = format!("{:?}", load_ok(&with_default, &key));
        assert_eq!(
            got, expected,
            "{key}: the documented default {value} is not the code's default"
        );
        checked += 1;
    }
    assert!(checked > 60, "only {checked} defaults were checked");
}

#[test]
fn every_toml_block_of_the_reference_loads_and_the_first_is_the_defaults() {
    let blocks = toml_blocks(&reference());
    assert!(blocks.len() >= 4);
    for (index, block) in blocks.iter().enumerate() {
        load_ok(block, &format!("docs/configuration.md block {}", index + 1));
    }
    let all_defaults = load_ok(&blocks[0], "the defaults block");
    assert_eq!(
        format!("{all_defaults:?}"),
        format!("{:?}", ServeConfig::default()),
        "the first block of docs/configuration.md writes out exactly the defaults"
    );
}

pub(super) fn needs_authentication(config: &ServeConfig, what: &str) {
    assert!(
        config.auth_mode != AuthMode::Static || !config.tokens.is_empty(),
        "{what}: a cluster gateway needs authentication"
    );
}

#[test]
fn the_example_configurations_load() {
    let serve = load_ok(
        &read("deploy/examples/serve.toml"),
        "deploy/examples/serve.toml",
    );
    assert!(!serve.gateway.tenant_limits.is_empty());
    let gateway = load_ok(&read("deploy/gateway.toml"), "deploy/gateway.toml");
    needs_authentication(&gateway, "deploy/gateway.toml");
    load_ok(&read("deploy/executor.toml"), "deploy/executor.toml");
    // compose.yaml mounts exactly these.
    let compose = read("compose.yaml");
    for file in ["./deploy/gateway.toml", "./deploy/executor.toml"] {
        assert!(compose.contains(file), "compose.yaml mounts {file}");
    }
}

/// The section of the reference about one subcommand.
fn subcommand_section<'a>(doc: &'a str, name: &str) -> &'a str {
    let heading = format!("### agent-runtime {name}\n");
    let start = doc
        .find(&heading)
        .unwrap_or_else(|| panic!("docs/configuration.md has no section {heading:?}"));
    let rest = &doc[start + heading.len()..];
    let end = rest
        .find("\n### ")
        .or_else(|| rest.find("\n## "))
        .unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn every_flag_and_environment_variable_of_every_subcommand_is_documented_with_its_default() {
    let doc = reference();
    let cli = Cli::command();
    let mut subcommands = 0;
    for subcommand in cli.get_subcommands() {
        subcommands += 1;
        let section = subcommand_section(&doc, subcommand.get_name());
        let rows: Vec<Vec<String>> = section.lines().filter_map(cells).collect();
        for argument in subcommand.get_arguments() {
            let id = argument.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            let long = argument
                .get_long()
                .unwrap_or_else(|| panic!("{id}: every argument is a --flag"));
            let flag = format!("--{long}");
            let row = rows
                .iter()
                .find(|row| {
                    row.first()
                        .and_then(|cell| leading_code(cell))
                        .is_some_and(|code| code.split(' ').next() == Some(flag.as_str()))
                })
                .unwrap_or_else(|| panic!("`{} {flag}` is not documented", subcommand.get_name()));
            let line = row.join(" | ");
            if let Some(env) = argument.get_env() {
                let env = env.to_str().unwrap();
                assert!(
                    line.contains(&format!("`{env}`")),
                    "{flag} of {}: its variable {env} is not in its row",
                    subcommand.get_name()
                );
            }
            for default in argument.get_default_values() {
                let default = default.to_str().unwrap();
                assert!(
                    line.contains(&format!("`{default}`")),
                    "{flag} of {}: its default {default} is not in its row: {line}",
                    subcommand.get_name()
                );
            }
        }
    }
    assert_eq!(
        subcommands, 9,
        "serve, executor, gateway, chat, migrate, admin, export, import, bundle-key"
    );
}

/// `"AGENT_RUNTIME_…"` and `"OTEL_…"` string literals in the sources of the processes.
fn variables_read_by_the_code() -> BTreeSet<String> {
    fn scan(dir: &Path, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                scan(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for prefix in ["\"AGENT_RUNTIME_", "\"OTEL_"] {
                    for (at, _) in text.match_indices(prefix) {
                        let name: String = text[at + 1..]
                            .chars()
                            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                            .collect();
                        if text[at + 1 + name.len()..].starts_with('"') && !name.contains("_TEST_")
                        {
                            found.insert(name);
                        }
                    }
                }
            }
        }
    }
    let mut found = BTreeSet::new();
    for dir in [
        "src",
        "cli/src",
        "gateway/src",
        "executor/src",
        "store/src",
        "telemetry/src",
        "client/src",
    ] {
        scan(&root().join(dir), &mut found);
    }
    found
}

#[test]
fn every_environment_variable_the_code_reads_is_documented() {
    let doc = reference();
    let variables = variables_read_by_the_code();
    assert!(variables.contains("AGENT_RUNTIME_LOG"), "{variables:?}");
    for variable in variables {
        assert!(
            doc.contains(&format!("`{variable}`")),
            "{variable} is read by the code but not in docs/configuration.md"
        );
    }
}

#[test]
fn the_readme_links_the_reference() {
    let readme = read("README.md");
    assert!(readme.contains("(docs/configuration.md)"));
}
