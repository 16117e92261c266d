//! `harness keys create|list|revoke`: API keys, straight in the daemon's database (no daemon
//! needs to run). The key itself is printed once, by `create`; the database keeps its hash.
//! Each change is written to the audit log, as `POST`/`DELETE /api/keys` would be.

use anyhow::{bail, Context};
use clap::Subcommand;

use orchestrator::caller::Scope;
use orchestrator::config::{Config, ServeArgs};
use orchestrator::keys::KeySpec;
use orchestrator::store::{KeyRow, NewAudit, Store};

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Make a key and print it (once: only its hash is kept).
    Create {
        /// The tenant whose threads the key reaches.
        #[arg(long)]
        tenant: String,
        /// Comma-separated: threads:read, threads:write, approvals, admin, metrics.
        #[arg(long)]
        scopes: String,
        /// Most USD the turns it sends may cost per UTC day.
        #[arg(long)]
        daily_usd: Option<f64>,
        /// Most of its turns running at once on a node.
        #[arg(long)]
        max_concurrent_turns: Option<u32>,
        /// Most requests per minute on a node.
        #[arg(long)]
        rpm: Option<u32>,
        #[command(flatten)]
        daemon: ServeArgs,
    },
    /// List every key (never the keys themselves).
    List {
        #[command(flatten)]
        daemon: ServeArgs,
    },
    /// Revoke a key by its id (`key_…`): it is refused from then on.
    Revoke {
        id: String,
        #[command(flatten)]
        daemon: ServeArgs,
    },
}

pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create {
            tenant,
            scopes,
            daily_usd,
            max_concurrent_turns,
            rpm,
            daemon,
        } => {
            let scopes = Scope::parse_list(&scopes).map_err(anyhow::Error::msg)?;
            let spec = KeySpec {
                tenant,
                scopes,
                daily_usd,
                max_concurrent_turns,
                rpm,
            };
            let store = open(&daemon).await?;
            let made = orchestrator::keys::create(&store, &spec)
                .await?
                .map_err(anyhow::Error::msg)?;
            audit(&store, "harness keys create", &made.row.id, 201).await?;
            eprintln!("{}", line(&made.row));
            eprintln!("The key is shown once; keep it now.");
            println!("{}", made.key);
        }
        KeysCommand::List { daemon } => {
            let store = open(&daemon).await?;
            for key in store.list_keys().await? {
                println!("{}", line(&key));
            }
        }
        KeysCommand::Revoke { id, daemon } => {
            let store = open(&daemon).await?;
            let Some(key) = store.revoke_key(&id).await? else {
                bail!("no key {id}");
            };
            audit(&store, "harness keys revoke", &key.id, 200).await?;
            println!("{}", line(&key));
        }
    }
    Ok(())
}

async fn open(args: &ServeArgs) -> anyhow::Result<Store> {
    let config = Config::load(args)?;
    let db = config.db_path();
    Store::open(&db)
        .await
        .with_context(|| format!("opening the database {db}"))
}

/// One key on one line, tab-separated: id, tenant, scopes, limits, created, revoked.
fn line(key: &KeyRow) -> String {
    let limit = |name: &str, value: Option<String>| {
        value.map_or_else(String::new, |v| format!("{name}={v}"))
    };
    let limits = [
        limit("daily_usd", key.daily_usd.map(|v| v.to_string())),
        limit(
            "max_concurrent_turns",
            key.max_concurrent_turns.map(|v| v.to_string()),
        ),
        limit("rpm", key.rpm.map(|v| v.to_string())),
    ]
    .into_iter()
    .filter(|l| !l.is_empty())
    .collect::<Vec<_>>()
    .join(",");
    let revoked = key.revoked_at.map_or_else(
        || "live".to_owned(),
        |at| format!("revoked {}", at.to_rfc3339()),
    );
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}",
        key.id,
        key.tenant,
        key.scopes,
        if limits.is_empty() { "-" } else { &limits },
        key.created_at.to_rfc3339(),
        revoked
    )
}

/// Writes the change to the audit log, with the status the API would have answered.
async fn audit(store: &Store, action: &str, key: &str, status: i64) -> anyhow::Result<()> {
    let path = format!("keys/{key}");
    store
        .record_audit(NewAudit {
            subject: "operator",
            tenant: None,
            action,
            path: &path,
            thread_id: None,
            status,
            remote: Some("local"),
        })
        .await
        .context("writing the audit entry")
}
