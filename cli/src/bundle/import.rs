//! `agent-runtime import`: a bundle into a store. Nothing is written before the whole bundle is
//! checked (its signature when one is required, the index's digest, every part's digest and
//! shape); then each part is imported on its own (a session all or nothing) and read back from
//! the store to verify it. Memory holds one part at a time: the index is read as a stream.
//! Importing a bundle again is a no-op, so an interrupted import is finished by running it again.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use agent_runtime::protocol::canonical::canonical_json;
use agent_runtime_store::JournalEntry;
use agent_runtime_store::journal::decode_line;
use agent_runtime_store::portable::{ImportCounts, ImportOutcome, record_key, same_entries};
use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

use super::format::{
    FORMAT, INDEX, MANIFEST, Manifest, PartKind, PartLine, SIGNATURE, VERSION, file_digest,
    part_path, verify_signature,
};
use super::progress::Progress;
use super::{BundleStore, tenant_receipts};

/// How to import.
#[derive(Default)]
pub struct ImportOptions {
    /// Report what would change; write nothing.
    pub dry_run: bool,
    /// Tenant ids to change on the way in: `from -> to`.
    pub tenant_map: BTreeMap<String, String>,
    /// Refuse a bundle not signed by the private key of this public key.
    pub public_key: Option<std::path::PathBuf>,
}

/// What an import did for one tenant (the tenant as imported, after any remap).
#[derive(Default)]
pub struct TenantReport {
    pub sessions: ImportCounts,
    pub records: ImportCounts,
    /// SHA-256 of the tenant's entries as the bundle holds them, and as the store holds them
    /// after the import (canonical JSON, one line each): equal when everything arrived.
    pub bundle_digest: Sha256,
    pub store_digest: Sha256,
    /// Parts whose entries the store does not hold as the bundle does after the import.
    pub mismatches: Vec<String>,
}

pub struct ImportReport {
    pub manifest: Manifest,
    pub tenants: BTreeMap<String, TenantReport>,
}

impl ImportReport {
    pub fn conflicts(&self) -> usize {
        self.tenants
            .values()
            .map(|t| t.sessions.conflicts.len() + t.records.conflicts.len())
            .sum()
    }

    pub fn mismatches(&self) -> usize {
        self.tenants.values().map(|t| t.mismatches.len()).sum()
    }
}

/// The largest manifest, signature, index line and part an import reads: what this server
/// writes stays far below them, and a bundle made to exhaust the importing host's memory is
/// refused before it is read. A part holds one session (or a tenant's records) whole.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
const MAX_SIGNATURE_BYTES: u64 = 4 << 10;
const MAX_INDEX_LINE_BYTES: u64 = 64 << 10;
pub const MAX_PART_BYTES: u64 = 1 << 30;

/// The file at `path`, refused when larger than `limit` bytes.
fn read_bounded(path: &Path, limit: u64, what: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    if file.metadata()?.len() > limit {
        return Err(std::io::Error::other(format!(
            "{what} is larger than {limit} bytes: not a bundle this server reads"
        )));
    }
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads and checks `manifest.json` (and its signature when a key is given).
pub fn read_manifest(bundle: &Path, public_key: Option<&Path>) -> anyhow::Result<Manifest> {
    let path = bundle.join(MANIFEST);
    let text = read_bounded(&path, MAX_MANIFEST_BYTES, "the manifest").map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => anyhow::anyhow!(
            "{} is not a finished bundle (no {MANIFEST}: an export still under way, or not a bundle)",
            bundle.display()
        ),
        _ => anyhow::anyhow!("reading the bundle's {MANIFEST}: {error}"),
    })?;
    if let Some(key) = public_key {
        let signature = read_bounded(
            &bundle.join(SIGNATURE),
            MAX_SIGNATURE_BYTES,
            "the signature",
        )
        .map_err(|_| anyhow::anyhow!("the bundle is not signed, and a signature is required"))?;
        verify_signature(&text, &String::from_utf8_lossy(&signature), key)?;
    }
    let manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|error| anyhow::anyhow!("the bundle's {MANIFEST} is not valid: {error}"))?;
    if manifest.format != FORMAT || manifest.version != VERSION {
        bail!(
            "this is a `{}` version {} bundle; this server reads `{FORMAT}` version {VERSION}",
            manifest.format,
            manifest.version
        );
    }
    let (bytes, sha256) = file_digest(&bundle.join(INDEX))?;
    if manifest.index.path != INDEX
        || bytes != manifest.index.bytes
        || sha256 != manifest.index.sha256
    {
        bail!("the bundle's index does not match its manifest (damaged or changed)");
    }
    Ok(manifest)
}

/// The index's lines, one at a time, each at most [`MAX_INDEX_LINE_BYTES`]; the `n`th must name
/// `parts/n.jsonl` (zero-padded).
fn index_lines(bundle: &Path) -> anyhow::Result<impl Iterator<Item = anyhow::Result<PartLine>>> {
    use std::io::Read;
    let file = std::fs::File::open(bundle.join(INDEX)).context("opening the bundle's index")?;
    let mut reader = std::io::BufReader::new(file);
    let bundle = bundle.to_path_buf();
    let mut at = 0_u64;
    Ok(std::iter::from_fn(move || {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(MAX_INDEX_LINE_BYTES + 1)
            .read_until(b'\n', &mut line);
        match read {
            Ok(0) => return None,
            Err(error) => return Some(Err(anyhow::anyhow!("reading the bundle's index: {error}"))),
            Ok(_) => {}
        }
        at += 1;
        Some(index_line(&bundle, at, &line))
    }))
}

/// Line `at` of the index, checked.
fn index_line(bundle: &Path, at: u64, line: &[u8]) -> anyhow::Result<PartLine> {
    if line.len() as u64 > MAX_INDEX_LINE_BYTES {
        bail!("line {at} of the bundle's index is longer than {MAX_INDEX_LINE_BYTES} bytes");
    }
    let part: PartLine = serde_json::from_slice(line)
        .map_err(|error| anyhow::anyhow!("line {at} of the bundle's index: {error}"))?;
    let (expected, _) = part_path(bundle, at);
    if part.path != expected {
        bail!(
            "line {at} of the bundle's index names {:?}, not {expected}",
            part.path
        );
    }
    if (part.kind == PartKind::Session) != part.session_id.is_some() {
        bail!("line {at} of the bundle's index: a session part names its session");
    }
    if part.bytes > MAX_PART_BYTES {
        bail!(
            "{} is {} bytes, more than the {MAX_PART_BYTES} a part may hold",
            part.path,
            part.bytes
        );
    }
    Ok(part)
}

/// A part's entries, checked against its index line.
fn read_part(bundle: &Path, part: &PartLine) -> anyhow::Result<Vec<JournalEntry>> {
    let text =
        read_bounded(&bundle.join(&part.path), part.bytes, &part.path).with_context(|| {
            format!(
                "reading {} (its index line says {} bytes)",
                part.path, part.bytes
            )
        })?;
    if text.len() as u64 != part.bytes || hex::encode(Sha256::digest(&text)) != part.sha256 {
        bail!(
            "{} does not match its digest in the index (damaged or changed)",
            part.path
        );
    }
    let mut entries = Vec::new();
    for (at, line) in text.split(|byte| *byte == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let decoded = serde_json::from_slice(line).ok().and_then(decode_line);
        let Some(decoded) = decoded else {
            bail!("line {} of {} is not a journal entry", at + 1, part.path);
        };
        entries.extend(decoded);
    }
    if entries.len() as u64 != part.entries {
        bail!(
            "{} holds {} entries, its index line says {}",
            part.path,
            entries.len(),
            part.entries
        );
    }
    Ok(entries)
}

/// Checks every part before anything is written.
fn check_parts(bundle: &Path, manifest: &Manifest) -> anyhow::Result<()> {
    let mut parts = 0;
    for part in index_lines(bundle)? {
        read_part(bundle, &part?)?;
        parts += 1;
    }
    if parts != manifest.index.parts {
        bail!(
            "the bundle's index lists {parts} parts, its manifest {}",
            manifest.index.parts
        );
    }
    Ok(())
}

/// Rewrites the tenant of every entry.
fn retenant(entry: &mut JournalEntry, to: &str) {
    let tenant = match entry {
        JournalEntry::Session { record } => &mut record.record.tenant_id,
        JournalEntry::Event { tenant_id, .. }
        | JournalEntry::EventKey { tenant_id, .. }
        | JournalEntry::Transcript { tenant_id, .. }
        | JournalEntry::DurableEvent { tenant_id, .. }
        | JournalEntry::ExecutionLease { tenant_id, .. }
        | JournalEntry::Lease { tenant_id, .. }
        | JournalEntry::Memory { tenant_id, .. } => tenant_id,
        _ => return,
    };
    to.clone_into(tenant);
}

/// What the store holds where the bundle's `entries` of `part` would go: the session's export,
/// or the records of the same ids.
async fn counterpart(
    store: &dyn BundleStore,
    tenant: &str,
    part: &PartLine,
    entries: &[JournalEntry],
) -> anyhow::Result<Vec<Option<JournalEntry>>> {
    match &part.session_id {
        Some(session) => Ok(store
            .export_session(tenant, session)
            .await?
            .map_or_else(Vec::new, |held| held.into_iter().map(Some).collect())),
        None => {
            let mut held: BTreeMap<String, JournalEntry> = BTreeMap::new();
            for entry in tenant_receipts(store, tenant).await? {
                held.insert(record_id(&entry), entry);
            }
            for entry in store.export_memories(tenant).await? {
                held.insert(record_id(&entry), entry);
            }
            Ok(entries
                .iter()
                .map(|entry| held.remove(&record_id(entry)))
                .collect())
        }
    }
}

fn record_id(entry: &JournalEntry) -> String {
    match record_key(entry) {
        Ok((kind, id)) => format!("{kind} {id}"),
        Err(_) => entry.kind().to_owned(),
    }
}

fn digest_entries<'a>(digest: &mut Sha256, entries: impl IntoIterator<Item = &'a JournalEntry>) {
    for entry in entries {
        let value = serde_json::to_value(entry).unwrap_or_default();
        digest.update(canonical_json(&value).as_bytes());
        digest.update(b"\n");
    }
}

/// Imports `bundle` into `store` (see the module docs).
pub async fn import(
    store: &dyn BundleStore,
    bundle: &Path,
    options: &ImportOptions,
    progress: &mut Progress,
) -> anyhow::Result<ImportReport> {
    let manifest = read_manifest(bundle, options.public_key.as_deref())?;
    check_parts(bundle, &manifest)?;
    let mut tenants: BTreeMap<String, TenantReport> = BTreeMap::new();
    for part in index_lines(bundle)? {
        let part = part?;
        let mut entries = read_part(bundle, &part)?;
        let tenant = options
            .tenant_map
            .get(&part.tenant_id)
            .cloned()
            .unwrap_or_else(|| part.tenant_id.clone());
        if tenant != part.tenant_id {
            entries
                .iter_mut()
                .for_each(|entry| retenant(entry, &tenant));
        }
        let report = tenants.entry(tenant.clone()).or_default();
        if options.dry_run {
            let held = counterpart(store, &tenant, &part, &entries).await?;
            would_import(report, &part, &entries, &held);
        } else {
            match part.kind {
                PartKind::Session => {
                    let outcome = store.import_session(entries.clone()).await?;
                    let id = part.session_id.clone().unwrap_or_default();
                    report.sessions.add("session", &id, outcome);
                }
                PartKind::Records => {
                    let counts = store.import_records(entries.clone()).await?;
                    report.records.imported += counts.imported;
                    report.records.unchanged += counts.unchanged;
                    report.records.conflicts.extend(counts.conflicts);
                }
            }
            let held = counterpart(store, &tenant, &part, &entries).await?;
            digest_entries(&mut report.bundle_digest, &entries);
            digest_entries(&mut report.store_digest, held.iter().flatten());
            let held: Vec<JournalEntry> = held.into_iter().flatten().collect();
            if !same_entries(&held, &entries) {
                report.mismatches.push(match &part.session_id {
                    Some(session) => format!("session {session}"),
                    None => "receipts and memories".to_owned(),
                });
            }
        }
        progress.part_done(&part);
    }
    progress.finish();
    if !options.dry_run {
        store.flush_imports().await?;
    }
    Ok(ImportReport { manifest, tenants })
}

/// The outcomes a dry run reports for a part, from what the store holds in its place.
fn would_import(
    report: &mut TenantReport,
    part: &PartLine,
    entries: &[JournalEntry],
    held: &[Option<JournalEntry>],
) {
    match &part.session_id {
        Some(session) => {
            let held: Vec<JournalEntry> = held.iter().flatten().cloned().collect();
            let outcome = if held.is_empty() {
                ImportOutcome::Imported
            } else if same_entries(&held, entries) {
                ImportOutcome::Unchanged
            } else {
                ImportOutcome::Conflict(format!(
                    "Session {session} already exists here with other content"
                ))
            };
            report.sessions.add("session", session, outcome);
        }
        None => {
            for (entry, held) in entries.iter().zip(held) {
                let id = record_id(entry);
                let outcome = match held {
                    None => ImportOutcome::Imported,
                    Some(held)
                        if same_entries(
                            std::slice::from_ref(held),
                            std::slice::from_ref(entry),
                        ) =>
                    {
                        ImportOutcome::Unchanged
                    }
                    Some(_) => ImportOutcome::Conflict(format!(
                        "The {id} already exists here with other content"
                    )),
                };
                report.records.add("record", &id, outcome);
            }
        }
    }
}
