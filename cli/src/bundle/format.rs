//! The session bundle format, version 1 (docs/bundles.md): a directory with
//!
//! - `parts/NNNNNN.jsonl`: one part per session, and one per tenant for its command receipts
//!   and memories, each line a JSONL store journal line (`{"v":1,"kind":...}`);
//! - `index.jsonl`: one [`PartLine`] per part, in the order they were written (per tenant,
//!   ascending: its sessions by id, then its records);
//! - `manifest.json` ([`Manifest`], schema `docs/schemas/bundle-manifest.schema.json`): what the
//!   bundle holds, with the SHA-256 of the index (which holds the SHA-256 of each part), written
//!   last, so a directory without it is an export still under way;
//! - `manifest.sig`, when signed: the Ed25519 signature of `manifest.json`'s bytes, base64.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const FORMAT: &str = "agent-runtime-bundle";
pub const VERSION: u32 = 1;
pub const MANIFEST: &str = "manifest.json";
pub const SIGNATURE: &str = "manifest.sig";
pub const INDEX: &str = "index.jsonl";
pub const PARTS: &str = "parts";

/// What a part holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PartKind {
    /// One session and everything it owns.
    Session,
    /// A tenant's command receipts and memories.
    Records,
}

/// One line of `index.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PartLine {
    /// Relative to the bundle, `parts/NNNNNN.jsonl`.
    pub path: String,
    pub kind: PartKind,
    pub tenant_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Journal lines in the part.
    pub entries: u64,
    pub bytes: u64,
    /// Lowercase hex SHA-256 of the part file.
    pub sha256: String,
    /// What the part holds, for the manifest's totals and the progress of an import.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub events: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub durable_events: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub receipts: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub memories: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// ISO-8601, when the export finished.
    pub created_at: String,
    /// `agent-runtime <version>`.
    pub producer: String,
    /// The store kind exported from: `jsonl` or `postgres`.
    pub source_store: String,
    /// The tenants asked for; `None`: the whole deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<String>>,
    /// The sessions asked for, as `tenant/session`; `None`: all of each tenant's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Vec<String>>,
    pub index: IndexSummary,
    pub totals: Totals,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IndexSummary {
    pub path: String,
    pub parts: u64,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Totals {
    pub tenants: u64,
    pub sessions: u64,
    pub events: u64,
    pub durable_events: u64,
    pub receipts: u64,
    pub memories: u64,
}

/// A file written while hashing and counting what goes into it.
pub struct HashedFile {
    file: std::io::BufWriter<std::fs::File>,
    hasher: Sha256,
    bytes: u64,
}

impl HashedFile {
    /// Readable by its owner only: a bundle holds what its sessions hold (prompts, answers).
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("creating {}", display_name(path)))?;
        Ok(Self {
            file: std::io::BufWriter::new(file),
            hasher: Sha256::new(),
            bytes: 0,
        })
    }

    pub fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.hasher.update(bytes);
        self.bytes += bytes.len() as u64;
        self.file.write_all(bytes).context("writing the bundle")
    }

    /// Flushes the file (and syncs it when `sync`); returns its size and hex SHA-256.
    pub fn finish(self, sync: bool) -> anyhow::Result<(u64, String)> {
        let file = self
            .file
            .into_inner()
            .map_err(|error| anyhow::anyhow!("writing the bundle: {}", error.error()))?;
        if sync {
            file.sync_all().context("syncing the bundle")?;
        }
        Ok((self.bytes, hex::encode(self.hasher.finalize())))
    }
}

/// The hex SHA-256 and size of a file, read in pieces.
pub fn file_digest(path: &Path) -> anyhow::Result<(u64, String)> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", display_name(path)))?;
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut file, &mut hasher)
        .with_context(|| format!("reading {}", display_name(path)))?;
    Ok((bytes, hex::encode(hasher.finalize())))
}

/// Syncs every file of the bundle directory and the directories themselves: what the manifest
/// vouches for is on disk before it is written.
pub fn sync_tree(bundle: &Path) -> anyhow::Result<()> {
    for directory in [bundle.join(PARTS), bundle.to_path_buf()] {
        for entry in std::fs::read_dir(&directory).context("reading the bundle directory")? {
            let path = entry.context("reading the bundle directory")?.path();
            if path.is_file() {
                std::fs::File::open(&path)
                    .and_then(|file| file.sync_all())
                    .with_context(|| format!("syncing {}", display_name(&path)))?;
            }
        }
        std::fs::File::open(&directory)
            .and_then(|handle| handle.sync_all())
            .context("syncing the bundle directory")?;
    }
    Ok(())
}

/// A path as errors show it: relative to the bundle when it is inside one (`parts/000001.jsonl`).
pub fn display_name(path: &Path) -> String {
    let components: Vec<_> = path.components().rev().take(2).collect();
    components
        .into_iter()
        .rev()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Makes the bundle directory and its `parts/`, open to their owner only.
pub fn create_dirs(bundle: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    for directory in [bundle.to_path_buf(), bundle.join(PARTS)] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&directory)
            .with_context(|| format!("creating {}", directory.display()))?;
    }
    Ok(())
}

pub fn part_path(bundle: &Path, number: u64) -> (String, PathBuf) {
    let relative = format!("{PARTS}/{number:06}.jsonl");
    let path = bundle.join(&relative);
    (relative, path)
}

/// Writes `bytes` to `path` through a temporary file and a rename, synced: a crash leaves the
/// old file or the new one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = HashedFile::create(&temporary)?;
    file.write(bytes)?;
    file.finish(true)?;
    std::fs::rename(&temporary, path).with_context(|| format!("writing {}", display_name(path)))?;
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)
            .and_then(|directory| directory.sync_all())
            .context("syncing the bundle directory")?;
    }
    Ok(())
}

/// A new Ed25519 signing key: its PKCS#8 document (the private key file, base64) and its public
/// key (base64).
pub fn generate_signing_key() -> anyhow::Result<(String, String)> {
    let random = ring::rand::SystemRandom::new();
    let document = Ed25519KeyPair::generate_pkcs8(&random)
        .map_err(|_| anyhow::anyhow!("generating a signing key failed"))?;
    let pair = Ed25519KeyPair::from_pkcs8(document.as_ref())
        .map_err(|_| anyhow::anyhow!("generating a signing key failed"))?;
    Ok((
        BASE64.encode(document.as_ref()),
        BASE64.encode(pair.public_key().as_ref()),
    ))
}

fn key_text(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the {what} {}", path.display()))?;
    BASE64
        .decode(text.trim())
        .map_err(|_| anyhow::anyhow!("the {what} {} is not base64", path.display()))
}

/// The signature of `manifest` with the private key in `key_file` (base64 PKCS#8), base64.
pub fn sign(manifest: &[u8], key_file: &Path) -> anyhow::Result<String> {
    let document = key_text(key_file, "signing key")?;
    let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&document).map_err(|_| {
        anyhow::anyhow!(
            "the signing key {} is not an Ed25519 private key (make one with `agent-runtime bundle keygen`)",
            key_file.display()
        )
    })?;
    Ok(BASE64.encode(pair.sign(manifest).as_ref()))
}

/// Checks `signature` (base64) of `manifest` against the public key in `key_file` (base64).
pub fn verify_signature(manifest: &[u8], signature: &str, key_file: &Path) -> anyhow::Result<()> {
    let public = key_text(key_file, "public key")?;
    let Ok(signature) = BASE64.decode(signature.trim()) else {
        bail!("the bundle's signature is not base64");
    };
    UnparsedPublicKey::new(&ED25519, public)
        .verify(manifest, &signature)
        .map_err(|_| {
            anyhow::anyhow!(
                "the bundle's signature does not match its manifest and this public key"
            )
        })
}
