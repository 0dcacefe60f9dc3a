//! Session bundles (docs/bundles.md): `agent-runtime export`, `agent-runtime import` and
//! `agent-runtime bundle-key`. They open the store directly, so they run beside a stopped
//! server: the JSONL store's lock refuses a running `serve`, and an export from PostgreSQL
//! refuses while executors are live on it.

mod export;
mod format;
mod import;
mod progress;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use agent_runtime_store::{
    JsonlStore, Portable, PostgresOptions, PostgresStore, Store, StoreOptions, WorkerStatus,
};
use anyhow::{Context, bail};

pub use export::ExportRequest;
pub use format::{Manifest, PartKind, PartLine};
pub use import::{ImportOptions, ImportReport};
use progress::Progress;

/// A store a bundle is read from or written to.
pub trait BundleStore: Store + Portable {}
impl<T: Store + Portable> BundleStore for T {}

/// Which store, as `serve` names it.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// `jsonl` (the embedded store of `serve`) or `postgres`.
    #[arg(long, env = "AGENT_RUNTIME_STORE", default_value = "jsonl")]
    pub store: String,
    /// The JSONL store's directory.
    #[arg(long, env = "AGENT_RUNTIME_DATA_DIR", default_value = ".agent-runtime")]
    pub data_dir: PathBuf,
    /// PostgreSQL URL for `--store postgres` (never printed).
    #[arg(long, env = "AGENT_RUNTIME_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Agent events the store keeps per session: the setting of the servers that use it.
    #[arg(long, default_value_t = 10_000)]
    pub max_events_per_session: u64,
}

/// Arguments of `export`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// The bundle directory to write (or to go on writing, after an interrupted export).
    #[arg(long)]
    pub out: PathBuf,
    /// Export only this tenant (repeatable); default: every tenant.
    #[arg(long = "tenant")]
    pub tenants: Vec<String>,
    /// Export only this session (repeatable), with the receipts of the commands that acted on it.
    #[arg(
        long = "session",
        value_name = "TENANT/SESSION",
        conflicts_with = "tenants"
    )]
    pub sessions: Vec<String>,
    /// Sign the bundle with this Ed25519 private key (`agent-runtime bundle-key`).
    #[arg(long)]
    pub sign_with: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub from: StoreArgs,
}

/// Arguments of `import`.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// The bundle directory.
    #[arg(long)]
    pub bundle: PathBuf,
    /// Report what would be imported, unchanged or refused; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Import tenant FROM as tenant TO (repeatable), e.g. `--tenant-map acme=acme-eu`.
    #[arg(long = "tenant-map", value_name = "FROM=TO")]
    pub tenant_map: Vec<String>,
    /// Refuse a bundle not signed with the private key of this public key.
    #[arg(long, value_name = "PUBLIC_KEY_FILE")]
    pub require_signature: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub to: StoreArgs,
}

/// Arguments of `bundle-key`.
#[derive(Debug, Clone, clap::Args)]
pub struct KeyArgs {
    /// Where to write the private key (readable by its owner only); the public key goes to the
    /// same path with `.pub` added.
    #[arg(long)]
    pub out: PathBuf,
}

/// Every command receipt of a tenant (`lease` entries), read page by page. A tenant's receipts
/// are bounded by its budget of stored results.
async fn tenant_receipts(
    store: &dyn BundleStore,
    tenant: &str,
) -> anyhow::Result<Vec<agent_runtime_store::JournalEntry>> {
    use agent_runtime_store::JournalEntry;
    use agent_runtime_store::portable::MAX_EXPORT_PAGE;
    let mut receipts = Vec::new();
    loop {
        let after = match receipts.last() {
            Some(JournalEntry::Lease { command_id, .. }) => Some(String::clone(command_id)),
            _ => None,
        };
        let page = store
            .export_receipts(tenant, after.as_deref(), MAX_EXPORT_PAGE)
            .await?;
        let full = page.len() == MAX_EXPORT_PAGE as usize;
        receipts.extend(page);
        if !full {
            return Ok(receipts);
        }
    }
}

/// Opens the store `args` names.
async fn open(args: &StoreArgs) -> anyhow::Result<(Arc<dyn BundleStore>, &'static str)> {
    match args.store.as_str() {
        "jsonl" => {
            let options = StoreOptions {
                max_events_per_session: args.max_events_per_session,
                fsync: true,
                ..StoreOptions::default()
            };
            let store = JsonlStore::open(&args.data_dir, options)
                .await
                .map_err(|error| anyhow::anyhow!("{error}"))?;
            Ok((Arc::new(store), "jsonl"))
        }
        "postgres" => {
            let Some(url) = &args.database_url else {
                bail!("--store postgres needs --database-url (or AGENT_RUNTIME_DATABASE_URL)");
            };
            let options = PostgresOptions {
                max_events_per_session: args.max_events_per_session,
                ..PostgresOptions::default()
            };
            let store = PostgresStore::connect(url, options)
                .await
                .map_err(|error| anyhow::anyhow!("opening the PostgreSQL store failed: {error}"))?;
            Ok((Arc::new(store), "postgres"))
        }
        other => bail!("--store must be `jsonl` or `postgres`, not `{other}`"),
    }
}

/// Refuses a PostgreSQL deployment whose executors are live: an export reads a stopped one.
async fn refuse_live(store: &dyn BundleStore) -> anyhow::Result<()> {
    let now = export::now_ms();
    let live = store
        .list_workers()
        .await?
        .into_iter()
        .filter(|worker| worker.status != WorkerStatus::Offline && worker.lease_expires_at_ms > now)
        .count();
    if live > 0 {
        bail!(
            "{live} executor(s) are live on this database: stop the cluster first (an export reads a stopped deployment, so nothing changes under it)"
        );
    }
    Ok(())
}

pub async fn run_export(args: ExportArgs) -> anyhow::Result<()> {
    let sessions = args
        .sessions
        .iter()
        .map(|named| match named.rsplit_once('/') {
            Some((tenant, session)) if !tenant.is_empty() && !session.is_empty() => {
                Ok((tenant.to_owned(), session.to_owned()))
            }
            _ => bail!("--session takes TENANT/SESSION, not `{named}`"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (store, kind) = open(&args.from).await?;
    if kind == "postgres" {
        refuse_live(&*store).await?;
    }
    let request = ExportRequest {
        out: &args.out,
        tenants: (!args.tenants.is_empty()).then(|| args.tenants.clone()),
        sessions: (!sessions.is_empty()).then_some(sessions),
        source_store: kind,
        sign_with: args.sign_with.as_deref(),
    };
    let mut progress = Progress::new("exported", None, args.quiet);
    let exported = export::export(&*store, &request, &mut progress).await;
    store.close().await.context("closing the store")?;
    let manifest = exported?;
    let totals = &manifest.totals;
    println!(
        "exported {} tenants, {} sessions ({} events, {} journal entries), {} receipts and {} memories to {}{}",
        totals.tenants,
        totals.sessions,
        totals.events,
        totals.durable_events,
        totals.receipts,
        totals.memories,
        args.out.display(),
        if args.sign_with.is_some() {
            " (signed)"
        } else {
            ""
        }
    );
    Ok(())
}

fn tenant_map(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((from, to)) if !from.is_empty() && !to.is_empty() => {
                Ok((from.to_owned(), to.to_owned()))
            }
            _ => bail!("--tenant-map takes FROM=TO, not `{pair}`"),
        })
        .collect()
}

pub async fn run_import(args: ImportArgs) -> anyhow::Result<()> {
    let options = ImportOptions {
        dry_run: args.dry_run,
        tenant_map: tenant_map(&args.tenant_map)?,
        public_key: args.require_signature.clone(),
    };
    // Checked before the store is opened: a bundle that is not one changes nothing.
    let manifest = import::read_manifest(&args.bundle, options.public_key.as_deref())?;
    let (store, _) = open(&args.to).await?;
    let verb = if args.dry_run { "checked" } else { "imported" };
    let mut progress = Progress::new(verb, Some(manifest.totals.sessions), args.quiet);
    let imported = import::import(&*store, &args.bundle, &options, &mut progress).await;
    store.close().await.context("closing the store")?;
    let report = imported?;
    print_report(&report, args.dry_run);
    let (conflicts, mismatches) = (report.conflicts(), report.mismatches());
    if conflicts > 0 || mismatches > 0 {
        bail!(
            "{conflicts} conflicting id(s) refused and {mismatches} part(s) not read back as the bundle holds them (listed above)"
        );
    }
    Ok(())
}

fn print_report(report: &ImportReport, dry_run: bool) {
    use sha2::Digest;
    let (done, kept) = match dry_run {
        true => ("would import", "already here"),
        false => ("imported", "unchanged"),
    };
    for (tenant, t) in &report.tenants {
        let mut line = format!(
            "tenant {tenant}: sessions {} {done}, {} {kept}, {} refused; receipts and memories {} {done}, {} {kept}, {} refused",
            t.sessions.imported,
            t.sessions.unchanged,
            t.sessions.conflicts.len(),
            t.records.imported,
            t.records.unchanged,
            t.records.conflicts.len(),
        );
        if !dry_run {
            let bundle = hex::encode(t.bundle_digest.clone().finalize());
            let store = hex::encode(t.store_digest.clone().finalize());
            match bundle == store && t.mismatches.is_empty() {
                true => line.push_str(&format!("; verified sha256:{bundle}")),
                false => line.push_str(&format!(
                    "; NOT verified: bundle sha256:{bundle}, store sha256:{store}"
                )),
            }
        }
        println!("{line}");
        for (kind, id, why) in t.sessions.conflicts.iter().chain(&t.records.conflicts) {
            println!("  refused {kind} {id}: {why}");
        }
        for part in &t.mismatches {
            println!("  not as in the bundle: {part}");
        }
    }
}

pub fn run_key(args: KeyArgs) -> anyhow::Result<()> {
    let (private, public) = format::generate_signing_key()?;
    let public_path = PathBuf::from(format!("{}.pub", args.out.display()));
    write_private(&args.out, &private)?;
    std::fs::write(&public_path, format!("{public}\n"))
        .with_context(|| format!("writing {}", public_path.display()))?;
    println!(
        "signing key: {} (keep it secret); public key: {} (give it to whoever imports)",
        args.out.display(),
        public_path.display()
    );
    Ok(())
}

fn write_private(path: &std::path::Path, key: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {} (it must not exist yet)", path.display()))?;
    writeln!(file, "{key}").with_context(|| format!("writing {}", path.display()))
}
