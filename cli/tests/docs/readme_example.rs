//! The README's curl walkthrough, run as written against the real binary.

use std::process::Command;

use crate::support::*;

const MARKER: &str = "<!-- readme-example";

/// The first ```sh block after the marker.
fn readme_block() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let after_marker = &readme[readme.find(MARKER).expect("the README marks its example")..];
    let start = after_marker
        .find("```sh\n")
        .expect("a sh block follows the marker")
        + "```sh\n".len();
    let body = &after_marker[start..];
    body[..body.find("```").expect("the block ends")].to_owned()
}

#[tokio::test]
async fn the_readme_curl_walkthrough_works_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path());
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &readme_block()])
        .env("BASE", &served.base)
        .env("TOKEN", &served.token)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the block failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("\"status\":\"started\""), "{stdout}");
    assert!(stdout.contains("\"loaded\":true"), "{stdout}");
    assert!(stdout.contains("\"status\":\"closed\""), "{stdout}");
    assert!(
        stdout.contains("event: session.closed"),
        "the replay ends with session.closed: {stdout}"
    );
    assert!(stdout.contains("[demo] You said: hello"), "{stdout}");
    stop(served);
}
