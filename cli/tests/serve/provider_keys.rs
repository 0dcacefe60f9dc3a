//! Where a provider's key comes from, as a user meets it on a real `serve` (docs/configuration.md
//! `[provider]`): without `api_key_env`/`api_key_file`, `openai` reads `OPENAI_API_KEY` and
//! `anthropic` reads `ANTHROPIC_API_KEY`; a provider that would send no key says so at start-up.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::fake_provider::{FakeProvider, Script, text_answer};
use crate::support::*;
use serde_json::json;

/// `serve` on `config` with `env` (the vendors' variables removed first), its output read.
fn start(dir: &std::path::Path, config: &str, env: &[(&str, &str)]) -> Child {
    let path = dir.join("serve.toml");
    std::fs::write(&path, config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env("AGENT_RUNTIME_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts")
}

/// The stderr lines of `child` until one contains `needle` (or the process ends).
fn stderr_until(child: &mut Child, needle: &str) -> String {
    let stderr = child.stderr.take().unwrap();
    let (lines, found) = std::sync::mpsc::channel();
    let needle = needle.to_owned();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(&needle) {
                break;
            }
        }
        let _ = lines.send(seen);
    });
    found
        .recv_timeout(Duration::from_secs(30))
        .expect("stderr before the deadline")
}

fn openai(base_url: &str) -> String {
    format!("[provider]\nkind = \"openai\"\nmodel = \"gpt-test\"\nbase_url = \"{base_url}\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_without_a_configured_key_reads_openai_api_key_or_warns_at_start_up() {
    let script: Script = Arc::new(|_auth, _body| (200, vec![], text_answer("keyed.")));
    let (provider, provider_url) = FakeProvider::start(script).await;

    // No key anywhere: a warning naming the variable, and the server still serves.
    let dir = tempfile::tempdir().unwrap();
    let mut child = start(dir.path(), &openai(&provider_url), &[]);
    let warned = stderr_until(&mut child, "OPENAI_API_KEY");
    assert!(
        warned.contains("no API key") && warned.contains("OPENAI_API_KEY"),
        "{warned}"
    );
    assert!(child.try_wait().unwrap().is_none(), "serve keeps running");
    let _ = child.kill();
    let _ = child.wait();

    // The vendor's variable: sent as the key.
    let dir = tempfile::tempdir().unwrap();
    let key = "sk-from-openai-api-key";
    let config = dir.path().join("serve.toml");
    std::fs::write(&config, openai(&provider_url)).unwrap();
    let config = config.display().to_string();
    let served = serve_with_env(
        &dir.path().join("data"),
        &["--listen", "127.0.0.1:0", "--config", &config],
        &[("OPENAI_API_KEY", key)],
    );
    let session = command(&served, "session.create", json!({})).await;
    let session = session["session"]["sessionId"].as_str().unwrap().to_owned();
    command(
        &served,
        "input.submit",
        json!({ "sessionId": session, "input": "hello" }),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while provider.calls().is_empty() {
        assert!(Instant::now() < deadline, "the model was called");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(provider.calls()[0].0, format!("Bearer {key}"));
    stop(served);
}

#[test]
fn anthropic_without_any_key_refuses_to_start_naming_anthropic_api_key() {
    let config = "[provider]\nkind = \"anthropic\"\nmodel = \"claude-test\"\n";
    let dir = tempfile::tempdir().unwrap();
    let mut child = start(dir.path(), config, &[]);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "serve refuses to start");
    assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");

    // With the vendor's variable it starts (and prints where it serves).
    let dir = tempfile::tempdir().unwrap();
    let mut child = start(dir.path(), config, &[("ANTHROPIC_API_KEY", "sk-ant-test")]);
    let stdout = child.stdout.take().unwrap();
    let serving = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.starts_with("agent-runtime is serving on "));
    assert!(serving, "serve started with ANTHROPIC_API_KEY");
    let _ = child.kill();
    let _ = child.wait();
}
