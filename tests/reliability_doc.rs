//! `docs/reliability.md` names a test for every P0 entry of the catalogue; this keeps the names
//! honest: each one is a test function somewhere in the workspace.

use std::path::{Path, PathBuf};

const P0_IDS: usize = 54;

/// The section of the defects an outside attack found (ATK-…), after the catalogue's entries.
const ATTACK_SECTION: &str = "## Defects found by an outside attack";

#[test]
fn every_attack_row_names_tests_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/reliability.md")).unwrap();
    let section = doc
        .split(ATTACK_SECTION)
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the outside attack's section");
    let rows: Vec<&str> = section
        .lines()
        .filter(|line| line.starts_with("| ATK-"))
        .collect();
    assert!(!rows.is_empty(), "the section lists its defects");
    let mut sources = String::new();
    collect_rust_sources(root, &mut sources);
    for row in rows {
        let id = row.split('|').nth(1).unwrap().trim();
        let names: Vec<&str> = row
            .split('|')
            .nth(2)
            .unwrap()
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|name| name.rsplit("::").next().unwrap())
            .collect();
        assert!(!names.is_empty(), "{id}: no test named");
        for name in names {
            assert!(
                sources.contains(&format!("fn {name}(")),
                "{id}: test {name} not found in the workspace"
            );
        }
    }
}

#[test]
fn every_p0_row_names_tests_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/reliability.md")).unwrap();
    let section = doc
        .split("## The P0 tests")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a P0 section");
    let rows: Vec<&str> = section
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| id "))
        .collect();
    assert_eq!(rows.len(), P0_IDS, "one row per P0 entry");

    let mut sources = String::new();
    collect_rust_sources(root, &mut sources);
    for row in rows {
        let id = row.split('|').nth(1).unwrap().trim();
        let prefix = id.to_lowercase().replace('-', "_") + "_";
        let tests_cell = row.split('|').nth(2).unwrap();
        let names: Vec<&str> = tests_cell
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|name| name.rsplit("::").next().unwrap())
            .filter(|name| name.starts_with(&prefix))
            .collect();
        assert!(!names.is_empty(), "{id}: no test named {prefix}…");
        for name in names {
            assert!(
                sources.contains(&format!("fn {name}(")),
                "{id}: test {name} not found in the workspace"
            );
        }
    }
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
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

    let mut sources = String::new();
    collect_rust_sources(root, &mut sources);
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
