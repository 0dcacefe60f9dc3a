//! `agent-runtime export`, `import` and `bundle-key` as an operator runs them (docs/bundles.md):
//! an export and an import each killed with `kill -9` part-way and run again finish the move and
//! verify clean; a running `serve` is refused as a source; signatures are required and checked;
//! a changed part is refused before anything is written; a dry run writes nothing; tenants are
//! remapped on the way in.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agent_runtime::protocol::{EventType, JsonObject, SessionStatus};
use agent_runtime_store::portable::MAX_EXPORT_PAGE;
use agent_runtime_store::{
    EventLog, JsonlStore, NewEvent, Portable, PostgresOptions, PostgresStore, SessionRecord,
    SessionRecords, StoreLifecycle, StoreOptions,
};
use serde_json::Value;

use crate::support::serve;

mod clients;

/// Sessions in the deployment the interrupted runs move: enough that each run takes seconds.
const SESSIONS: usize = 1_500;

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runtime"));
    command.env_remove("AGENT_RUNTIME_STORE");
    command.env_remove("AGENT_RUNTIME_DATABASE_URL");
    command
}

fn run(args: &[&str]) -> Output {
    binary().args(args).output().expect("the binary runs")
}

fn succeeded(args: &[&str]) -> String {
    let output = run(args);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn refused(args: &[&str]) -> String {
    let output = run(args);
    assert!(!output.status.success(), "{args:?} should be refused");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A JSONL deployment of `tenants` tenants with `sessions` sessions in all, three events each.
async fn deployment(dir: &Path, tenants: usize, sessions: usize) {
    let store = JsonlStore::open(dir, StoreOptions::default())
        .await
        .unwrap();
    for n in 0..sessions {
        let tenant_id = format!("tenant-{:02}", n % tenants);
        let session_id = format!("session-{n:05}");
        store
            .put_session(&SessionRecord {
                tenant_id: tenant_id.clone(),
                created_by: "operator".to_owned(),
                session_id: session_id.clone(),
                status: SessionStatus::Active,
                created_at: "2026-01-01T00:00:00.000Z".to_owned(),
                updated_at: "2026-01-01T00:00:00.000Z".to_owned(),
                metadata: None,
                profile: None,
            })
            .await
            .unwrap();
        let events = (0..3)
            .map(|turn| NewEvent {
                session_id: session_id.clone(),
                request_id: None,
                occurred_at: String::new(),
                event_type: EventType::SessionStream,
                data: JsonObject::from_iter([
                    ("type".to_owned(), Value::from("content")),
                    ("text".to_owned(), Value::from(format!("turn {turn}"))),
                ]),
            })
            .collect();
        store
            .append_events(&tenant_id, &session_id, events, None)
            .await
            .unwrap();
    }
    store.close().await.unwrap();
}

fn as_args(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

/// Starts `args` and kills it (SIGKILL) once `reached` holds; fails if it finished first.
fn kill_when(args: &[&str], reached: impl Fn() -> bool) {
    let mut child: Child = binary()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !reached() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{args:?} finished before it could be interrupted"
        );
        assert!(Instant::now() < deadline, "{args:?} made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The `(imported, unchanged)` sessions an import's report lines add up to.
fn sessions_reported(report: &str) -> (u64, u64) {
    let number = |line: &str, after: &str| -> u64 {
        let rest = &line[line.find(after).expect("a count") + after.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    report
        .lines()
        .filter(|line| line.starts_with("tenant "))
        .map(|line| {
            assert!(line.contains("verified sha256:"), "{line}");
            (number(line, "sessions "), number(line, "imported, "))
        })
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_and_an_import_killed_part_way_finish_when_run_again() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    deployment(&source, 7, SESSIONS).await;
    let source_arg = source.to_str().unwrap();

    // One export in one go, for reference.
    let whole = work.path().join("whole");
    succeeded(&[
        "export",
        "--quiet",
        "--data-dir",
        source_arg,
        "--out",
        whole.to_str().unwrap(),
    ]);

    // The same export, killed part-way, then run again.
    let bundle = work.path().join("bundle");
    let bundle_arg = bundle.to_str().unwrap();
    let index = bundle.join("index.jsonl");
    let args = [
        "export",
        "--quiet",
        "--data-dir",
        source_arg,
        "--out",
        bundle_arg,
    ];
    kill_when(&args, || lines(&index) >= 100);
    assert!(!bundle.join("manifest.json").exists());
    let done = succeeded(&args);
    assert!(done.contains(&format!("{SESSIONS} sessions")), "{done}");
    let parts = |dir: &Path| -> Vec<Value> {
        std::fs::read_to_string(dir.join("index.jsonl"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    assert_eq!(
        parts(&bundle),
        parts(&whole),
        "the resumed export is the whole one"
    );
    // A finished bundle is not written over.
    assert!(refused(&args).contains("already holds a finished bundle"));

    // The import into PostgreSQL, killed part-way, then run again.
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    let target = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .unwrap();
    let import = [
        "import",
        "--bundle",
        bundle_arg,
        "--quiet",
        "--store",
        "postgres",
        "--database-url",
        &url,
    ];
    // Counted on a connection of its own, in a runtime of its own: `kill_when` polls from
    // blocking code (a pooled connection would outlive the runtime it was made in).
    let counted = || {
        let url = url.clone();
        let count = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                use sqlx::Connection;
                let mut connection = sqlx::PgConnection::connect(&url).await.expect("connect");
                let count = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sessions")
                    .fetch_one(&mut connection)
                    .await
                    .expect("counting the imported sessions");
                let _closed = connection.close().await;
                count
            })
        });
        count.join().unwrap()
    };
    kill_when(&import, || counted() >= 100);
    let interrupted = counted() as u64;
    assert!(interrupted < SESSIONS as u64);
    let report = succeeded(&import);
    let (imported, unchanged) = sessions_reported(&report);
    assert_eq!(imported + unchanged, SESSIONS as u64, "report: {report}");
    assert!(unchanged >= interrupted, "{report}");
    assert_eq!(counted(), SESSIONS as i64);
    let tenants = target.list_tenants(None, MAX_EXPORT_PAGE).await.unwrap();
    assert_eq!(tenants.len(), 7);
    target.close().await.unwrap();
}

#[tokio::test]
async fn a_running_source_unsigned_or_changed_bundles_are_refused_and_nothing_is_written() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    deployment(&source, 3, 12).await;
    let source_arg = source.to_str().unwrap();

    // A running `serve` holds its store: nothing is exported under it.
    let served = serve(&source);
    let out = work.path().join("while-running");
    let error = refused(&[
        "export",
        "--data-dir",
        source_arg,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(error.contains("locked"), "{error}");
    drop(served);

    // Signed with one key; a bundle's signature is checked against the public key given.
    let key = work.path().join("bundle.key");
    let other = work.path().join("other.key");
    succeeded(&["bundle-key", "--out", key.to_str().unwrap()]);
    succeeded(&["bundle-key", "--out", other.to_str().unwrap()]);
    let key_mode = std::os::unix::fs::PermissionsExt::mode(&key.metadata().unwrap().permissions());
    assert_eq!(key_mode & 0o777, 0o600);
    let bundle = work.path().join("signed");
    let bundle_arg = bundle.to_str().unwrap();
    let sign = ["export", "--data-dir", source_arg, "--out", bundle_arg];
    succeeded(&[&sign[..], &["--sign-with", key.to_str().unwrap()]].concat());
    validate_against_schemas(&bundle);
    // A bundle holds prompts and answers: its owner's only.
    for (path, mode) in [
        (bundle.clone(), 0o700),
        (bundle.join("parts/000001.jsonl"), 0o600),
    ] {
        let actual =
            std::os::unix::fs::PermissionsExt::mode(&path.metadata().unwrap().permissions());
        assert_eq!(actual & 0o777, mode, "{}", path.display());
    }

    let target = work.path().join("target");
    let target_arg = target.to_str().unwrap();
    let import = ["import", "--bundle", bundle_arg, "--data-dir", target_arg];
    let other_pub = format!("{}.pub", other.display());
    let error = refused(&[&import[..], &["--require-signature", &other_pub]].concat());
    assert!(error.contains("signature does not match"), "{error}");

    // A changed part: refused before anything is written.
    let changed = work.path().join("changed");
    copy_dir(&bundle, &changed);
    let part = changed.join("parts/000002.jsonl");
    let text = std::fs::read_to_string(&part)
        .unwrap()
        .replace("turn 1", "turn X");
    std::fs::write(&part, text).unwrap();
    let error = refused(&[
        "import",
        "--bundle",
        changed.to_str().unwrap(),
        "--data-dir",
        target_arg,
    ]);
    assert!(
        error.contains("parts/000002.jsonl does not match its digest"),
        "{error}"
    );
    let unsigned = work.path().join("unsigned");
    copy_dir(&bundle, &unsigned);
    std::fs::remove_file(unsigned.join("manifest.sig")).unwrap();
    let key_pub = format!("{}.pub", key.display());
    let error = refused(&[
        "import",
        "--bundle",
        unsigned.to_str().unwrap(),
        "--data-dir",
        target_arg,
        "--require-signature",
        &key_pub,
    ]);
    assert!(error.contains("not signed"), "{error}");

    // A dry run says what would happen and writes nothing.
    let dry = succeeded(&[&import[..], &["--dry-run"]].concat());
    assert!(dry.contains("sessions 4 would import"), "{dry}");
    let store = JsonlStore::open(&target, StoreOptions::default())
        .await
        .unwrap();
    assert!(store.list_tenants(None, 10).await.unwrap().is_empty());
    store.close().await.unwrap();

    // With the right key it imports, remapping one tenant; again, it changes nothing.
    let remap = ["--tenant-map", "tenant-01=tenant-renamed"];
    let signed = [&import[..], &["--require-signature", &key_pub], &remap[..]].concat();
    let report = succeeded(&signed);
    assert!(
        report.contains("tenant tenant-renamed: sessions 4 imported"),
        "{report}"
    );
    let again = succeeded(&signed);
    assert!(
        again.contains("tenant tenant-renamed: sessions 0 imported, 4 unchanged"),
        "{again}"
    );
    let store = JsonlStore::open(&target, StoreOptions::default())
        .await
        .unwrap();
    let tenants = store.list_tenants(None, 10).await.unwrap();
    assert_eq!(tenants, ["tenant-00", "tenant-02", "tenant-renamed"]);
    let session = store
        .get_session("tenant-renamed", "session-00001")
        .await
        .unwrap()
        .expect("the remapped tenant's session");
    assert_eq!(session.tenant_id, "tenant-renamed");
    store.close().await.unwrap();

    // One session alone.
    let one = work.path().join("one");
    let one_arg = one.to_str().unwrap();
    let only = |session: &str| {
        let named = format!("tenant-00/{session}");
        [
            "export",
            "--data-dir",
            source_arg,
            "--out",
            one_arg,
            "--session",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain([named])
        .collect::<Vec<String>>()
    };
    let error = refused(&as_args(&only("nope")));
    assert!(
        error.contains("tenant tenant-00 has no session nope"),
        "{error}"
    );
    let exported = succeeded(&as_args(&only("session-00003")));
    assert!(exported.contains("1 tenants, 1 sessions"), "{exported}");
    let alone = work.path().join("alone");
    succeeded(&[
        "import",
        "--bundle",
        one_arg,
        "--data-dir",
        alone.to_str().unwrap(),
    ]);
    let store = JsonlStore::open(&alone, StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(store.list_tenants(None, 10).await.unwrap(), ["tenant-00"]);
    let sessions = store.list_session_ids("tenant-00", None, 10).await.unwrap();
    assert_eq!(sessions, ["session-00003"]);
    store.close().await.unwrap();
}

/// Checks `manifest.json` and every index line against the published schemas with the
/// `jsonschema` Python package (an independent validator, installed by scripts/test.sh).
fn validate_against_schemas(bundle: &Path) {
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schema");
    let script = r#"
import json, sys, jsonschema
docs, bundle = sys.argv[1], sys.argv[2]
def check(name, instance):
    schema = json.load(open(f"{docs}/{name}.schema.json"))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = [error.message for error in validator.iter_errors(instance)]
    if errors:
        sys.exit(f"{name}: {errors}")
check("BundleManifest", json.load(open(f"{bundle}/manifest.json")))
lines = open(f"{bundle}/index.jsonl").read().splitlines()
for line in lines:
    check("BundlePart", json.loads(line))
print(len(lines))
"#;
    let output = Command::new("python3")
        .args(["-c", script, docs, bundle.to_str().unwrap()])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("parts")).unwrap();
    for entry in walk(from) {
        let relative = entry.strip_prefix(from).unwrap();
        std::fs::copy(&entry, to.join(relative)).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Rewrites `bundle`'s index as `index` and its manifest to match it (a self-consistent bundle
/// nobody here exported).
fn forge_index(bundle: &Path, index: &[u8]) {
    use sha2::Digest;
    std::fs::write(bundle.join("index.jsonl"), index).unwrap();
    let path = bundle.join("manifest.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["index"]["bytes"] = Value::from(index.len());
    manifest["index"]["sha256"] = Value::from(hex::encode(sha2::Sha256::digest(index)));
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
}

#[tokio::test]
async fn a_bundle_made_to_exhaust_memory_is_refused_before_it_is_read() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    deployment(&source, 1, 2).await;
    let bundle = work.path().join("bundle");
    let bundle_arg = bundle.to_str().unwrap();
    succeeded(&[
        "export",
        "--quiet",
        "--data-dir",
        source.to_str().unwrap(),
        "--out",
        bundle_arg,
    ]);
    let target = work.path().join("target");
    let import = [
        "import",
        "--bundle",
        bundle_arg,
        "--data-dir",
        target.to_str().unwrap(),
    ];
    let first_line = std::fs::read_to_string(bundle.join("index.jsonl"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();

    // An index line of 100 KiB.
    let mut long: Value = serde_json::from_str(&first_line).unwrap();
    long["tenantId"] = Value::from("t".repeat(100 << 10));
    forge_index(&bundle, format!("{long}\n").as_bytes());
    let error = refused(&import);
    assert!(error.contains("longer than 65536 bytes"), "{error}");

    // A part that claims 2 GiB, and one whose file is larger than its line says.
    let mut huge: Value = serde_json::from_str(&first_line).unwrap();
    huge["bytes"] = Value::from(2_u64 << 30);
    forge_index(&bundle, format!("{huge}\n").as_bytes());
    let error = refused(&import);
    assert!(
        error.contains("more than the 1073741824 a part may hold"),
        "{error}"
    );
    let mut short: Value = serde_json::from_str(&first_line).unwrap();
    short["bytes"] = Value::from(10);
    forge_index(&bundle, format!("{short}\n").as_bytes());
    let error = refused(&import);
    assert!(error.contains("its index line says 10 bytes"), "{error}");
    assert!(
        !target.join("server-store.jsonl").exists() || {
            let store = JsonlStore::open(&target, StoreOptions::default())
                .await
                .unwrap();
            let empty = store.list_tenants(None, 10).await.unwrap().is_empty();
            store.close().await.unwrap();
            empty
        }
    );
}
