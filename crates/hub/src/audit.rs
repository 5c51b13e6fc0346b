//! The audit log: who approved, froze, unfroze, promoted or overrode what, when and why. It is
//! append-only: [`record`] is the only write, and the API has no route that changes or deletes
//! an entry. Every entry is also sent as a notification ([`crate::notify`]).

use kalypso_hub_api::{AuditEntry, AuditKind, AuditList};
use sqlx::Row;

use crate::db::{Db, DbError, searchable};
use crate::model::format_time;
use crate::notify::{Event, EventKind, Notifier};

/// An entry to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Who.
    pub actor: String,
    /// What.
    pub kind: AuditKind,
    /// Where.
    pub environment: String,
    /// The control-plane commit, if any.
    pub commit: Option<String>,
    /// Why (comment, reason, message).
    pub reason: String,
    /// More, for people.
    pub detail: String,
}

fn event_kind(kind: AuditKind) -> EventKind {
    match kind {
        AuditKind::Approval => EventKind::Approval,
        AuditKind::Freeze => EventKind::Freeze,
        AuditKind::Unfreeze => EventKind::Unfreeze,
        AuditKind::Override => EventKind::Override,
        _ => EventKind::Promotion,
    }
}

/// Appends `entry` (now) and notifies.
pub async fn record(db: &Db, notifier: &Notifier, entry: Entry) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO audit (at, actor, kind, environment, commit_sha, reason, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(crate::model::now_ms())
    .bind(&entry.actor)
    .bind(entry.kind.as_str())
    .bind(&entry.environment)
    .bind(&entry.commit)
    .bind(&entry.reason)
    .bind(&entry.detail)
    .execute(db.pool())
    .await?;
    let mut message = format!("{} by {}", entry.kind.as_str(), entry.actor);
    if let Some(c) = &entry.commit {
        message.push_str(&format!(" of {}", kalypso_git::control_plane::short(c)));
    }
    if !entry.reason.is_empty() {
        message.push_str(&format!(": {}", entry.reason));
    }
    if !entry.detail.is_empty() {
        message.push_str(&format!(" ({})", entry.detail));
    }
    notifier.send(Event {
        kind: event_kind(entry.kind),
        environment: entry.environment,
        commit: entry.commit,
        actor: entry.actor,
        message,
    });
    Ok(())
}

/// The filters of `GET /api/v1/audit`.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Environment.
    pub environment: Option<String>,
    /// Kind.
    pub kind: Option<AuditKind>,
    /// Actor.
    pub actor: Option<String>,
    /// Page size.
    pub limit: i64,
    /// Page start.
    pub offset: i64,
}

/// A page of the log, newest first.
pub async fn list(db: &Db, filter: &Filter) -> Result<AuditList, DbError> {
    let texts = [&filter.environment, &filter.actor];
    if !texts.into_iter().flatten().all(|t| searchable(t)) {
        return Ok(AuditList {
            total: 0,
            entries: Vec::new(),
        });
    }
    let mut conditions = Vec::new();
    let mut binds: Vec<String> = Vec::new();
    for (column, value) in [
        ("environment", filter.environment.clone()),
        ("kind", filter.kind.map(|k| k.as_str().to_owned())),
        ("actor", filter.actor.clone()),
    ] {
        if let Some(v) = value {
            binds.push(v);
            conditions.push(format!("{column} = ${}", binds.len()));
        }
    }
    let filter_sql = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let count_sql = format!("SELECT COUNT(*) FROM audit {filter_sql}");
    let mut count = sqlx::query(&count_sql);
    for b in &binds {
        count = count.bind(b.as_str());
    }
    let total: i64 = count.fetch_one(db.pool()).await?.try_get(0)?;
    let page_sql = format!(
        "SELECT id, at, actor, kind, environment, commit_sha, reason, detail FROM audit {filter_sql} \
         ORDER BY id DESC LIMIT {} OFFSET {}",
        filter.limit, filter.offset
    );
    let mut page = sqlx::query(&page_sql);
    for b in &binds {
        page = page.bind(b.as_str());
    }
    let mut entries = Vec::new();
    for row in page.fetch_all(db.pool()).await? {
        let kind: String = row.try_get(3)?;
        entries.push(AuditEntry {
            id: row.try_get(0)?,
            at: format_time(row.try_get(1)?),
            actor: row.try_get(2)?,
            kind: kind.parse().unwrap_or(AuditKind::Promotion),
            environment: row.try_get(4)?,
            commit: row.try_get(5)?,
            reason: row.try_get(6)?,
            detail: row.try_get(7)?,
        });
    }
    Ok(AuditList {
        total: u64::try_from(total).unwrap_or_default(),
        entries,
    })
}
