//! The database: SQLite (the default, one file) or PostgreSQL (shared by several replicas),
//! reached through sqlx's `Any` driver so that every query is written once, with `$1`
//! placeholders and SQL both engines accept (`ON CONFLICT`, `RETURNING`, `CASE`).
//!
//! The schema lives in versioned migrations (`migrations/sqlite`, `migrations/postgres`: they
//! differ only in identity columns), embedded at build time and applied on start; PostgreSQL
//! serialises concurrent migrators with an advisory lock. SQLite runs in WAL mode with a busy
//! timeout, so that readers never wait for the writer and a second process waits its turn.

use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::{AnyPool, Executor};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("migrations/postgres");

/// The default database: a SQLite file in the working directory.
pub const DEFAULT_DATABASE: &str = "sqlite://kalypso-hub.db";

/// Which engine a [`Db`] talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SQLite (one file, one writer at a time).
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// A database failure, classified for HTTP: unavailable (503, retry) or anything else.
/// Messages never hold the database URL or a credential.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database cannot be reached, is locked or is shutting down: retry later.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database URL is not usable.
    #[error("database URL {url}: {reason}")]
    Url {
        /// The URL without its password.
        url: String,
        /// Why.
        reason: String,
    },
    /// Any other database error.
    #[error("database error: {0}")]
    Other(String),
}

/// Whether `text` can be looked up: PostgreSQL's text cannot hold a NUL character (it answers
/// an error, not "no rows"), and nothing stored holds one, so a name with NUL names nothing.
pub fn searchable(text: &str) -> bool {
    !text.contains('\0')
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> DbError {
        use sqlx::Error as E;
        let text = kalypso_git::redact(&e.to_string());
        match &e {
            E::Io(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed | E::Tls(_) | E::Protocol(_) => {
                DbError::Unavailable(text)
            }
            E::Database(db) => {
                let code = db.code().unwrap_or_default();
                // SQLite: 5 busy, 6 locked (and their extended codes), 10 I/O, 13 full
                // (the disk or `max_page_count`: the transaction was rolled back, nothing was
                // acknowledged, and it works again once there is room), 14 cannot open;
                // PostgreSQL: class 08 (connection), 53 (resources, disk full included), 57
                // (operator intervention: shutdown, cancelled), 40001/40P01 (serialisation,
                // deadlock).
                let sqlite_busy = code
                    .parse::<i64>()
                    .map(|c| matches!(c & 0xff, 5 | 6 | 10 | 13 | 14))
                    .unwrap_or(false);
                let pg_transient = ["08", "53", "57", "40001", "40P01"]
                    .iter()
                    .any(|p| code.starts_with(p));
                if sqlite_busy || pg_transient {
                    DbError::Unavailable(text)
                } else {
                    DbError::Other(text)
                }
            }
            _ => DbError::Other(text),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for DbError {
    fn from(e: sqlx::migrate::MigrateError) -> DbError {
        match e {
            sqlx::migrate::MigrateError::Execute(e) => DbError::from(e),
            other => DbError::Other(format!("migration failed: {other}")),
        }
    }
}

/// How to connect.
#[derive(Clone, Debug)]
pub struct DbOptions {
    /// Connections in the pool.
    pub max_connections: u32,
    /// How long to wait for a connection (then: unavailable).
    pub acquire_timeout: Duration,
    /// SQLite: how long a statement waits for a lock held by another writer.
    pub busy_timeout: Duration,
}

impl Default for DbOptions {
    fn default() -> DbOptions {
        DbOptions {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(5),
        }
    }
}

/// `url` without the password of its user info.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// The URL of database `name` on the server `url` names (`scheme://authority/database?query`,
/// its query kept): where the hub's benchmark and tests make a database of their own beside
/// the one they were given. `None` for a URL without `://`.
pub fn with_database(url: &str, name: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, query) = match rest.split_once('?') {
        Some((a, q)) => (a, format!("?{q}")),
        None => (rest, String::new()),
    };
    let host = authority.split('/').next().unwrap_or_default();
    Some(format!("{scheme}://{host}/{name}{query}"))
}

/// The database: a pool and its engine.
#[derive(Clone, Debug)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
}

impl Db {
    /// Connects to `url` (`sqlite://PATH`, created if missing; `postgres://...`) and applies
    /// the migrations.
    pub async fn connect(url: &str, options: &DbOptions) -> Result<Db, DbError> {
        sqlx::any::install_default_drivers();
        let bad = |reason: &str| DbError::Url {
            url: redact_url(url),
            reason: reason.to_owned(),
        };
        let (backend, url) = if url.starts_with("sqlite:") {
            let mut url = url.to_owned();
            if !url.contains("mode=") {
                url.push(if url.contains('?') { '&' } else { '?' });
                url.push_str("mode=rwc");
            }
            (Backend::Sqlite, url)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_owned())
        } else {
            return Err(bad("not a sqlite:// or postgres:// URL"));
        };
        let connect_options: AnyConnectOptions = url.parse().map_err(|_| bad("cannot be parsed"))?;
        let busy_ms = options.busy_timeout.as_millis();
        let pool = AnyPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        conn.execute(format!("PRAGMA busy_timeout = {busy_ms}").as_str())
                            .await?;
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(connect_options)
            .await?;
        let db = Db { pool, backend };
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator.run(&db.pool).await?;
        Ok(db)
    }

    /// The pool.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The engine.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A transaction on `connection` (one of the pool's, taken by the caller so that it can
    /// drop the connection if the transaction fails) that holds the write lock from its
    /// start (SQLite: `BEGIN IMMEDIATE`, so that it never has to upgrade a read snapshot
    /// another writer made stale; PostgreSQL: row locks are taken as rows are written).
    pub async fn begin_write<'c>(
        &self,
        connection: &'c mut sqlx::AnyConnection,
    ) -> Result<sqlx::Transaction<'c, sqlx::Any>, DbError> {
        use sqlx::Connection;
        Ok(match self.backend {
            Backend::Sqlite => connection.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => connection.begin().await?,
        })
    }

    /// A read-only transaction whose statements all see one snapshot of the database (an
    /// answer's counts and lists agree with each other).
    pub async fn begin_read(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, DbError> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin().await?,
            Backend::Postgres => {
                self.pool
                    .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await?
            }
        })
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<(), DbError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes every connection: later calls fail as unavailable.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact_url("postgres://kalypso:s3cret@db:5432/hub"),
            "postgres://kalypso:***@db:5432/hub"
        );
        assert_eq!(redact_url("sqlite://hub.db"), "sqlite://hub.db");
    }

    #[test]
    fn another_database_on_the_same_server_keeps_the_query() {
        assert_eq!(
            with_database("postgres://k:p@db:5432/postgres?sslmode=disable", "t1").as_deref(),
            Some("postgres://k:p@db:5432/t1?sslmode=disable")
        );
        assert_eq!(
            with_database("postgres://k:p@db:5432", "t1").as_deref(),
            Some("postgres://k:p@db:5432/t1")
        );
        assert_eq!(with_database("no-scheme", "t1"), None);
    }
}
