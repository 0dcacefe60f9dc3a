//! `docs/reliability.md` names a test for every P0 entry of the catalogue; this keeps the names
//! honest: each one is a test function somewhere in the workspace.

use std::path::{Path, PathBuf};

const P0_IDS: usize = 54;

/// The section of the defects an outside attack found (ATK-…), after the catalogue's entries.
const ATTACK_SECTION: &str = "## Defects found by an outside attack";

#[test]
fn every_attack_row_names_tests_that_exist() {
    let rows = section_rows(ATTACK_SECTION);
    assert!(
        rows.iter().any(|row| row.starts_with("| ATK-")),
        "the section lists its defects"
    );
    let sources = rust_sources();
    for row in &rows {
        assert_named_tests_exist(row, &sources, |_| true);
    }
}

#[test]
fn every_p0_row_names_tests_that_exist() {
    let rows = section_rows("## The P0 tests");
    assert_eq!(rows.len(), P0_IDS, "one row per P0 entry");
    let sources = rust_sources();
    for row in &rows {
        let id = row.split('|').nth(1).unwrap().trim();
        let prefix = id.to_lowercase().replace('-', "_") + "_";
        assert_named_tests_exist(row, &sources, |name| name.starts_with(&prefix));
    }
}

/// The table rows (header left out) of the section that starts at `heading`.
fn section_rows(heading: &str) -> Vec<String> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let doc = std::fs::read_to_string(root.join("docs/reliability.md")).unwrap();
    let section = doc
        .split(heading)
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("a section {heading:?}"));
    section
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| id "))
        .map(str::to_owned)
        .collect()
}

/// The row's tests (backticked names in its second cell that `wanted` keeps) are functions of
/// the workspace, and there is at least one.
fn assert_named_tests_exist(row: &str, sources: &str, wanted: impl Fn(&str) -> bool) {
    let id = row.split('|').nth(1).unwrap().trim();
    let names: Vec<&str> = row
        .split('|')
        .nth(2)
        .unwrap()
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|name| name.rsplit("::").next().unwrap())
        .filter(|name| wanted(name))
        .collect();
    assert!(!names.is_empty(), "{id}: no test named");
    for name in names {
        assert!(
            sources.contains(&format!("fn {name}(")),
            "{id}: test {name} not found in the workspace"
        );
    }
}

fn rust_sources() -> String {
    let mut sources = String::new();
    collect_rust_sources(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")),
        &mut sources,
    );
    sources
}

fn collect_rust_sources(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path: PathBuf = entry.path();
        let name = entry.file_name();
        if name == "target" || name == "node_modules" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect_rust_sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// Every other catalogue entry says where it stands in words a reader can hold us to: covered
/// (naming tests that exist) or not applicable, never "not covered", "partly" or "likely"; and
/// every test it names after its id exists in the workspace. All 142 catalogue ids have a row.
#[test]
fn every_other_entry_is_covered_or_not_applicable_and_names_tests_that_exist() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let doc = std::fs::read_to_string(root.join("docs/reliability.md")).unwrap();
    let section = doc
        .split("## The other catalogue entries")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a section of the other entries");
    let rows: Vec<&str> = section
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| id "))
        .collect();
    // The catalogue's entries; the outside attack's rows (ATK-…) come after them.
    let catalogue = doc.split(ATTACK_SECTION).next().unwrap_or_default();
    let mut ids: Vec<&str> = catalogue
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| id "))
        .filter_map(|line| line.split('|').nth(1).map(str::trim))
        .filter(|id| id.contains('-') && id.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 142, "one row per catalogue entry");

    let sources = rust_sources();
    for row in rows {
        let id = row.split('|').nth(1).unwrap().trim();
        let status = row.split('|').skip(2).collect::<Vec<_>>().join("|");
        let lower = status.to_lowercase();
        assert!(
            lower.contains("covered") || lower.contains("n.a."),
            "{id}: neither covered nor n.a.: {status}"
        );
        for vague in ["not covered", "partly", "likely", "mostly"] {
            assert!(!lower.contains(vague), "{id} says \"{vague}\"");
        }
        let prefix = id.to_lowercase().replace('-', "_") + "_";
        let named: Vec<&str> = status
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| word.starts_with(&prefix) && word.len() > prefix.len() + 3)
            // A test file named after the entry is a path, not a test.
            .filter(|word| !status.contains(&format!("{word}.rs")))
            .collect();
        for name in named {
            assert!(
                sources.contains(&format!("fn {name}(")),
                "{id}: test {name} not found in the workspace"
            );
        }
    }
}
